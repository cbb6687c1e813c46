-- moonflow.test — `moonflow test`: busted's runner as a library, inside the
-- host, so specs may call mf.sleep, mf.http and flows. Returns the counts;
-- prints "N passed, N failed" as the last line.
local output = require "moonflow.busted_output"

local Exit = {}

return function(argv)
    local compat = require "busted.compatibility"
    -- busted ends the process on its own; we want the counts back instead.
    compat.exit = function(code)
        error(setmetatable({ code = code }, Exit), 0)
    end
    arg = { [0] = "moonflow test", "--output=moonflow.busted_output" }
    for i = 1, #argv do arg[#arg + 1] = argv[i] end
    local ok, err = pcall(require "busted.runner", { standalone = false })
    if not ok and getmetatable(err) ~= Exit then
        io.stderr:write("moonflow test: ", tostring(err), "\n")
        return 0, 1
    end
    local c = output.counts
    io.stdout:write(("%d passed, %d failed\n"):format(c.passed,
        c.failed + c.errors))
    io.stdout:flush()
    if not ok and c.failed + c.errors == 0 then return c.passed, 1 end
    return c.passed, c.failed + c.errors
end
