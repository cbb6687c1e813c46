-- moonflow.test — `moonflow test`: busted's runner as a library, inside the
-- host, so specs may call mf.sleep, mf.http and flows. Returns the counts;
-- prints "N passed, N failed" as the last line: on stdout with busted's
-- plain output, on stderr when an output handler was asked for (-o TAP,
-- json, junit ...), so that handler's stdout stays well-formed. The counts
-- come from moonflow.busted_output, which sits in front of whichever
-- handler prints, so they are right for every one of them.
local output = require "moonflow.busted_output"

local Exit = {}

-- Takes busted's output options (-o NAME, -oNAME, --output NAME,
-- --output=NAME) out of argv; returns the handler named last, or nil.
local function take_output_option(argv)
    local kept, name = {}, nil
    local i = 1
    while i <= #argv do
        local a = argv[i]
        local value = a:match("^%-%-output=(.*)$") or
            (a ~= "-o" and a:match("^%-o(.+)$"))
        if value then
            name = value
        elseif a == "-o" or a == "--output" then
            name = argv[i + 1]
            i = i + 1
        else
            kept[#kept + 1] = a
        end
        i = i + 1
    end
    return kept, name
end

return function(argv)
    local compat = require "busted.compatibility"
    -- busted ends the process on its own; we want the counts back instead.
    compat.exit = function(code)
        error(setmetatable({ code = code }, Exit), 0)
    end
    local args, handler = take_output_option(argv)
    output.handler = handler
    arg = { [0] = "moonflow test", "--output=moonflow.busted_output" }
    for i = 1, #args do arg[#arg + 1] = args[i] end
    local ok, err = pcall(require "busted.runner", { standalone = false })
    if not ok and getmetatable(err) ~= Exit then
        io.stderr:write("moonflow test: ", tostring(err), "\n")
        return 0, 1
    end
    local c = output.counts
    local out = handler and io.stderr or io.stdout
    io.stdout:flush()
    out:write(("%d passed, %d failed\n"):format(c.passed, c.failed + c.errors))
    out:flush()
    if not ok and c.failed + c.errors == 0 then return c.passed, 1 end
    return c.passed, c.failed + c.errors
end
