-- Leak checks: after flows, timeouts, errors and timers, the host's
-- coroutines, registry references, timers and flows return to baseline.
local mf = require "moonflow"

local function counts()
    local c = mf.debug.counts()
    return { coroutines = c.coroutines, refs = c.refs, timers = c.timers,
                      flows = c.flows }
end

local function same(a, b)
    for k, v in pairs(a) do if b[k] ~= v then return false end end
    return true
end

-- Lets finished work be collected. Given the baseline, waits (up to 2 s)
-- for the counts to come back to it: a loaded machine ends canceled tasks
-- and background timers late, and a leak never comes back at all.
local function settle(base)
    local deadline = mf.now() + 2000
    repeat
        collectgarbage()
        mf.sleep(10)
        collectgarbage()
    until not base or same(counts(), base) or mf.now() >= deadline
end

describe("the host", function()
    local base
    before_each(function()
        settle()
        base = counts()
    end)

    it("releases everything after flows", function()
        for _ = 1, 20 do
            mf.series { mf.task.timer(1), mf.parallel { mf.task.timer(1),
                mf.series { mf.task.timer(1) } } }:wait()
        end
        settle(base)
        assert.are.same(base, counts())
    end)

    it("releases everything after timeouts", function()
        for _ = 1, 5 do
            mf.parallel {
                mf.task.timer(500, { timeout = 1 }),
                mf.task.go { name = "sleep_ms", args = { 30 }, timeout = 1 },
            }:wait()
        end
        mf.sleep(60) -- the go calls run to their end on the pool
        settle(base)
        assert.are.same(base, counts())
    end)

    it("releases everything after a callback raised", function()
        for _ = 1, 5 do
            pcall(function()
                mf.series { mf.task.timer(1, { callback = function() error("x") end }),
                                        mf.task.timer(300) }:wait()
            end)
        end
        settle(base)
        assert.are.same(base, counts())
    end)

    it("releases everything after tasks waited on alone", function()
        for _ = 1, 5 do
            mf.task.timer(1):wait()
            mf.task.timer(500, { timeout = 1 }):wait()
            mf.go("sha256", "x")
            mf.go("sha256") -- fails: one argument expected
            mf.task.go { name = "sleep_ms", args = { 30 }, timeout = 1 }:wait()
        end
        mf.sleep(60) -- the go calls run to their end on the pool
        settle(base)
        assert.are.same(base, counts())
        assert.are.equal(0, mf.debug.counts().tasks)
    end)

    it("releases the coroutines of timers, failed ones too", function()
        for i = 1, 10 do
            mf.timer.at(1, function() mf.sleep(1); if i % 2 == 0 then error("x") end end)
        end
        local h = mf.timer.every(1, function() end)
        mf.sleep(30)
        h:cancel()
        settle(base)
        assert.are.same(base, counts())
    end)

    it("releases the callbacks and results of pushed tasks", function()
        for _ = 1, 10 do
            local n = 0
            local function again(_, flow)
                n = n + 1
                if n < 3 then flow:push(mf.task.timer(1, { callback = again })) end
            end
            mf.series { mf.task.timer(1, { callback = again }) }:wait()
        end
        settle(base)
        assert.are.same(base, counts())
    end)
end)
