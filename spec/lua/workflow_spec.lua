-- Workflow's primitives as steps: named counters (mf.task.counter,
-- mf.count), conditionals (mf.task.conditional, mf.signal), resource pools
-- (mf.resource_pool(n):step(s)) — their counts, order, limits, and units
-- given back however a step ended; mf.task.lua's finally under them.
local mf = require "moonflow"

describe("mf.task.counter and mf.count", function()
    it("ends once counted n times, counts made before it runs included", function()
        local c = mf.task.counter("c1", 3)
        assert.equals(1, mf.count("c1"))
        local t = mf.spawn(function() return c:wait() end)
        mf.sleep(2)
        assert.is_false(t:done())
        assert.equals(2, mf.count("c1", 2))
        local ok, r = t:wait()
        assert.is_true(ok)
        assert.equals("success", r.state)
        assert.equals(3, r.values[1])
        assert.equals(0, mf.count("c1")) -- nobody left under that name
    end)

    it("counts the oldest counter first and spills over to the next", function()
        local a, b = mf.task.counter("c2", 2), mf.task.counter("c2", 2)
        assert.equals(3, mf.count("c2", 3))
        local r = mf.parallel { a, mf.task.lua(function() mf.count("c2") end), b }:wait()
        assert.equals("success", r[1].state)
        assert.equals("success", r[3].state)
    end)

    it("is a step of a parallel that ends when the others counted it", function()
        local r = mf.parallel {
            mf.task.counter("c3", 2),
            mf.task.lua(function() mf.sleep(2) mf.count("c3") end),
            mf.task.lua(function() mf.sleep(4) mf.count("c3") end),
        }:wait()
        assert.equals("success", r[1].state)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.task.counter("", 1) end)
        assert.has_error(function() mf.task.counter("x", 0) end)
        assert.has_error(function() mf.count("x", 1.5) end)
    end)
end)

describe("mf.task.conditional and mf.signal", function()
    it("waits for the signal and gets its value, oldest waiter first", function()
        local first = mf.spawn(function() return mf.task.conditional("go"):wait() end)
        mf.sleep(1)
        local second = mf.spawn(function() return mf.task.conditional("go"):wait() end)
        mf.sleep(2)
        assert.is_true(mf.signal("go", "one"))
        assert.is_true(mf.signal("go", "two"))
        assert.is_false(mf.signal("go", "nobody"))
        assert.equals("one", select(2, first:wait()).values[1])
        assert.equals("two", select(2, second:wait()).values[1])
    end)

    it("times out as a step, and a signal after it wakes nobody", function()
        local r = mf.task.lua { fn = function() return mf.task.conditional("late"):wait() end,
                                timeout = 5 }:wait()
        assert.equals("timeout", r.state)
        assert.is_false(mf.signal("late", 1))
    end)
end)

describe("mf.resource_pool", function()
    it("runs at most n of its steps at once, in arrival order", function()
        local pool = mf.resource_pool(2)
        local running, peak, order = 0, 0, {}
        local steps = {}
        for i = 1, 6 do
            steps[i] = pool:step(mf.task.lua(function()
                order[#order + 1] = i
                running = running + 1
                peak = math.max(peak, running)
                mf.sleep(3)
                running = running - 1
                return i
            end))
        end
        local r = mf.parallel(steps):wait()
        assert.equals(2, peak)
        assert.are.same({ 1, 2, 3, 4, 5, 6 }, order)
        assert.equals(6, r[6].values[1].values[1])
        assert.equals(2, pool:free())
    end)

    it("gives the unit back when a step times out or fails", function()
        local pool = mf.resource_pool(1)
        local r = mf.task.lua { fn = function() return pool:step(mf.task.timer(200)):wait() end,
                                timeout = 5 }:wait()
        assert.equals("timeout", r.state)
        r = pool:step(mf.task.lua(function() error("step failed") end)):wait()
        assert.equals("success", r.state) -- the pool step ran; its inner step failed
        assert.equals("task error", r.values[1].state)
        mf.sleep(2)
        assert.equals(1, pool:free())
        assert.equals(1, mf.parallel { pool:step(mf.task.lua(function() return 1 end)) }:wait()[1]
            .values[1].values[1])
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.resource_pool(0) end)
        assert.has_error(function() mf.resource_pool(1):step("x") end)
    end)
end)

describe("mf.task.lua's finally", function()
    it("runs once however the step ended, with how and the thread", function()
        local seen = {}
        local function finally(how, thread)
            seen[#seen + 1] = how .. ":" .. type(thread)
        end
        mf.task.lua { fn = function() return 1 end, finally = finally }:wait()
        mf.task.lua { fn = function() error("x") end, finally = finally }:wait()
        mf.task.lua { fn = function() mf.sleep(100) end, finally = finally, timeout = 2 }:wait()
        assert.are.same({ "done:thread", "error:thread", "aborted:thread" }, seen)
        assert.has_error(function() mf.task.lua { fn = print, finally = 1 }:wait() end)
    end)
end)
