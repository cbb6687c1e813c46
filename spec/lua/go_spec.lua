-- mf.go and mf.task.go: registered C functions on the compute pool.
local mf = require "moonflow"

describe("mf.go", function()
    it("runs a C function on the pool and returns its result", function()
        assert.are.equal(
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            mf.go("sha256", "abc"))
    end)

    it("converts number arguments to strings", function()
        assert.are.equal("5", mf.go("sleep_ms", 5))
    end)

    it("returns nil, err when the function fails", function()
        local v, err = mf.go("sha256") -- wants one argument
        assert.is_nil(v)
        assert.are.equal("invalid argument", err)
    end)

    it("raises for a name that is not registered", function()
        assert.has_error(function() mf.go("no_such_function") end)
    end)

    it("raises for an argument that is not a string or number", function()
        assert.has_error(function() mf.go("sha256", {}) end)
    end)

    it("keeps the loop free while the pool works", function()
        local ticks = 0
        local h = mf.timer.every(5, function() ticks = ticks + 1 end)
        mf.go("sleep_ms", 60)
        h:cancel()
        assert.is_true(ticks >= 3, "ticks " .. ticks)
    end)
end)

describe("mf.task.go", function()
    it("runs calls side by side in a parallel", function()
        -- One after the other they would take at least 400 ms (a sleep
        -- never ends early); side by side about 200, with room for a
        -- loaded machine.
        local t0 = mf.now()
        local r = mf.parallel {
            mf.task.go("sleep_ms", 200),
            mf.task.go("sleep_ms", 200),
        }:wait()
        local took = mf.now() - t0
        assert.is_true(took >= 200 and took < 350, "took " .. took)
        assert.are.equal("200", r[1].value)
        assert.are.equal("success", r[2].state)
    end)

    it("takes a table form with a timeout", function()
        local r = mf.task.go { name = "sleep_ms", args = { 300 }, timeout = 20 }
            :wait()
        assert.are.equal("timeout", r.state)
        assert.is_nil(r.value)
    end)
end)
