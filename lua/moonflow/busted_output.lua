-- moonflow.busted_output — the output handler `moonflow test` gives busted:
-- it counts results for the "N passed, N failed" line and hands the
-- printing to the handler the user asked for (M.handler: a busted handler
-- name such as "TAP" or "json", a module name, or a .lua file; nil: busted's
-- plain terminal output), so the counts never depend on that handler.
local M = { counts = { passed = 0, failed = 0, errors = 0 }, handler = nil }

-- The printing handler, found as busted's own loader finds one.
local function load_handler(name)
    if name:match("%.lua$") then return dofile(name) end
    local missing = "^module '.-' not found"
    local ok, handler = pcall(require, "busted.outputHandlers." .. name)
    if ok then return handler end
    if not tostring(handler):match(missing) then error(handler, 0) end
    ok, handler = pcall(require, name)
    if ok then return handler end
    if tostring(handler):match(missing) then
        error(("-o %s: no such output handler (busted's TAP, json, junit, " ..
            "gtest, plainTerminal, utfTerminal; a module; or a .lua file)")
            :format(name), 0)
    end
    error(handler, 0)
end

local function count(busted, counts)
    busted.subscribe({ "test", "end" }, function(_, _, status)
        if status == "success" then
            counts.passed = counts.passed + 1
        elseif status == "failure" then
            counts.failed = counts.failed + 1
        elseif status == "error" then
            counts.errors = counts.errors + 1
        end
        return nil, true
    end)
    -- Errors outside tests (a file that fails to load, a describe block);
    -- those inside an `it` are counted by its "test end" status.
    busted.subscribe({ "error" }, function(element)
        if element.descriptor ~= "it" then counts.errors = counts.errors + 1 end
        return nil, true
    end)
end

setmetatable(M, { __call = function(_, options)
    local busted = require "busted"
    count(busted, M.counts)
    return load_handler(M.handler or "plainTerminal")(options)
end })

return M
