-- Background timers: mf.timer.at and mf.timer.every.
local mf = require "moonflow"

describe("mf.timer.at", function()
    it("runs fn(...) once after the delay, in its own coroutine", function()
        local got
        local t0 = mf.now()
        mf.timer.at(20, function(a, b)
            mf.sleep(1) -- a fresh coroutine: it may wait
            got = { a, b, mf.now() - t0 }
        end, "x", 7)
        mf.sleep(60)
        assert.are.equal("x", got[1])
        assert.are.equal(7, got[2])
        assert.is_true(got[3] >= 20)
    end)

    it("passes nil arguments through", function()
        local n
        mf.timer.at(1, function(...) n = select("#", ...) end, nil, 2, nil)
        mf.sleep(20)
        assert.are.equal(3, n)
    end)

    it("can be canceled before it fires", function()
        local fired = false
        local h = mf.timer.at(20, function() fired = true end)
        assert.is_true(h:pending())
        assert.is_true(h:cancel())
        assert.is_false(h:pending())
        assert.is_false(h:cancel())
        mf.sleep(40)
        assert.is_false(fired)
    end)

    it("is not pending once it has fired", function()
        local h = mf.timer.at(1, function() end)
        mf.sleep(20)
        assert.is_false(h:pending())
    end)

    it("counts an error in fn and keeps the host running", function()
        local before = mf.debug.counts().errors
        mf.timer.at(1, function() error("timer failure (expected by the spec)") end)
        mf.sleep(20)
        assert.are.equal(before + 1, mf.debug.counts().errors)
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() mf.timer.at(-1, function() end) end)
        assert.has_error(function() mf.timer.at(1, "nope") end)
    end)
end)

describe("mf.timer.every", function()
    it("runs fn every interval until canceled", function()
        local n = 0
        local h = mf.timer.every(10, function() n = n + 1 end)
        mf.sleep(75)
        h:cancel()
        local seen = n
        assert.is_true(seen >= 4 and seen <= 8, "ticks " .. seen)
        mf.sleep(30)
        assert.are.equal(seen, n)
    end)

    it("may be canceled from its own function", function()
        local n, h = 0, nil
        h = mf.timer.every(5, function() n = n + 1; if n == 3 then h:cancel() end end)
        mf.sleep(60)
        assert.are.equal(3, n)
    end)

    it("rejects an interval under 1 ms", function()
        assert.has_error(function() mf.timer.every(0, function() end) end)
    end)
end)
