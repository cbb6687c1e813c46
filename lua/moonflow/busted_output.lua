-- moonflow.busted_output — busted's plain terminal output, counting results
-- for the "N passed, N failed" line of `moonflow test`.
local M = { counts = { passed = 0, failed = 0, errors = 0 } }

setmetatable(M, { __call = function(_, options)
    local busted = require "busted"
    local handler = require "busted.outputHandlers.plainTerminal"(options)
    local counts = M.counts
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
    return handler
end })

return M
