-- Background timers: mf.timer.at and mf.timer.every.
local mf = require "moonflow"

-- Waits (up to 2 s) until cond() holds: a loaded machine may run a timer
-- late, never early, so the specs wait for the event, not a fixed time.
local function eventually(cond)
    local deadline = mf.now() + 2000
    while not cond() and mf.now() < deadline do mf.sleep(5) end
    return cond()
end

describe("mf.timer.at", function()
    it("runs fn(...) once after the delay, in its own coroutine", function()
        local got
        local t0 = mf.now()
        mf.timer.at(20, function(a, b)
            mf.sleep(1) -- a fresh coroutine: it may wait
            got = { a, b, mf.now() - t0 }
        end, "x", 7)
        assert.is_true(eventually(function() return got ~= nil end))
        assert.are.equal("x", got[1])
        assert.are.equal(7, got[2])
        assert.is_true(got[3] >= 20)
    end)

    it("passes nil arguments through", function()
        local n
        mf.timer.at(1, function(...) n = select("#", ...) end, nil, 2, nil)
        assert.is_true(eventually(function() return n ~= nil end))
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
        local fired = false
        local h = mf.timer.at(1, function() fired = true end)
        assert.is_true(eventually(function() return fired end))
        assert.is_false(h:pending())
    end)

    it("counts an error in fn and keeps the host running", function()
        local before = mf.debug.counts().errors
        mf.timer.at(1, function() error("timer failure (expected by the spec)") end)
        assert.is_true(eventually(function()
            return mf.debug.counts().errors > before
        end))
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
        local t0 = mf.now()
        local h = mf.timer.every(10, function() n = n + 1 end)
        assert.is_true(eventually(function() return n >= 4 end), "ticks " .. n)
        h:cancel()
        local seen = n
        -- never early: at most one tick per 10 ms that passed
        assert.is_true(seen <= (mf.now() - t0) / 10 + 1, "ticks " .. seen)
        mf.sleep(30)
        assert.are.equal(seen, n)
    end)

    it("may be canceled from its own function", function()
        local n, h = 0, nil
        h = mf.timer.every(5, function() n = n + 1; if n == 3 then h:cancel() end end)
        assert.is_true(eventually(function() return not h:pending() end))
        mf.sleep(20)
        assert.are.equal(3, n)
    end)

    it("rejects an interval under 1 ms", function()
        assert.has_error(function() mf.timer.every(0, function() end) end)
    end)
end)
