-- mf.log and mf.worker outside `moonflow serve` (the serve tests check
-- the lines themselves: spec/integration/test_serve.py, HandlerUtilities).
local mf = require "moonflow"

describe("mf.log", function()
    it("takes nginx's levels and any values, and returns nothing", function()
        for _, level in ipairs { "emerg", "alert", "crit", "error", "warn",
                                 "notice", "info", "debug" } do
            assert.equals(0, select("#", mf.log(level, "spec: ", level, " ", 1, nil, true, {})))
        end
        mf.log("debug", ("long "):rep(2000)) -- below the default level: skipped
    end)

    it("raises on a level it does not know", function()
        assert.has_error(function() mf.log("loud", "x") end,
            'mf.log(level, ...): level: a level expected ("debug", "info", "notice", '
            .. '"warn", "error", "crit", "alert" or "emerg")')
        assert.has_error(function() mf.log() end)
    end)
end)

describe("mf.worker", function()
    it("is worker 0 of 1 in a script", function()
        assert.equals(0, mf.worker.id)
        assert.equals(1, mf.worker.count)
    end)
end)
