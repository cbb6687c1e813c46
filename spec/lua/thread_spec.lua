-- mf.spawn, thread:wait, mf.wait_any, mf.semaphore, mf.queue, mf.task.lua:
-- results and errors, timeouts on every wait, FIFO order, a queue's
-- back-pressure and close, waits that ended by timeout never take a unit or
-- a value, Lua steps side by side in flows, and nothing left behind
-- (mf.debug.counts).
local mf = require "moonflow"

describe("mf.spawn", function()
    it("runs fn(...) from the next turn; wait gives true and its results", function()
        local order = {}
        local t = mf.spawn(function(a, b)
            order[#order + 1] = "thread"
            mf.sleep(5)
            return a + b, nil, "x"
        end, 1, 2)
        order[#order + 1] = "spawner"
        assert.is_false(t:done())
        assert.are.same({ true, 3, nil, "x" }, { t:wait() })
        assert.are.same({ "spawner", "thread" }, order)
        assert.is_true(t:done())
        assert.are.same({ true, 3, nil, "x" }, { t:wait() }) -- again: the same
    end)

    it("gives false and the error with its traceback when fn raises", function()
        local ok, err = mf.spawn(function() error("boom") end):wait()
        assert.is_false(ok)
        assert.matches("thread_spec.lua:%d+: boom", err)
        assert.matches("stack traceback", err)
    end)

    it("times out a wait without ending the thread", function()
        local t = mf.spawn(function() mf.sleep(60) return "late" end)
        assert.are.same({ nil, "timeout" }, { t:wait(5) })
        assert.are.same({ true, "late" }, { t:wait() })
    end)

    it("lets several coroutines wait for one thread", function()
        local t = mf.spawn(function() mf.sleep(10) return 7 end)
        local a = mf.spawn(function() return select(2, t:wait()) end)
        local b = mf.spawn(function() return select(2, t:wait()) end)
        assert.are.same({ true, 7 }, { a:wait() })
        assert.are.same({ true, 7 }, { b:wait() })
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.spawn("no") end, "mf.spawn(fn, ...): a function expected")
        local t = mf.spawn(function() end)
        assert.has_error(function() t:wait(-1) end)
        t:wait()
    end)
end)

describe("mf.wait_any", function()
    it("returns the first thread to end and its results", function()
        local slow = mf.spawn(function() mf.sleep(80) return "slow" end)
        local fast = mf.spawn(function() mf.sleep(5) return "fast" end)
        local t, ok, v = mf.wait_any(slow, fast)
        assert.equals(fast, t)
        assert.is_true(ok)
        assert.equals("fast", v)
        assert.equals(slow, (mf.wait_any(slow)))
    end)

    it("times out, and returns at once for a thread already ended", function()
        local slow = mf.spawn(function() mf.sleep(60) end)
        assert.are.same({ nil, "timeout" }, { mf.wait_any(slow, { timeout = 5 }) })
        local done = mf.spawn(function() return 1 end)
        done:wait()
        assert.equals(done, (mf.wait_any(slow, done)))
        slow:wait()
        assert.has_error(function() mf.wait_any() end)
        assert.has_error(function() mf.wait_any({}) end)
    end)
end)

describe("mf.semaphore", function()
    it("hands units to waiters in the order they came", function()
        local sem = mf.semaphore(0)
        local got = {}
        local ts = {}
        for i = 1, 3 do
            ts[i] = mf.spawn(function() assert(sem:wait()) got[#got + 1] = i end)
        end
        mf.sleep(5)
        sem:post(2)
        mf.sleep(5)
        assert.are.same({ 1, 2 }, got)
        assert.equals(0, sem:count())
        sem:post()
        ts[3]:wait()
        assert.are.same({ 1, 2, 3 }, got)
    end)

    it("times out a wait, and a timed-out wait takes no unit", function()
        local sem = mf.semaphore(1)
        assert.is_true(sem:wait())
        assert.are.same({ nil, "timeout" }, { sem:wait(5) })
        sem:post()
        assert.equals(1, sem:count()) -- not given to the waiter that left
        assert.is_true(sem:wait(0))
    end)

    it("bounds concurrency around any work", function()
        local sem, running, peak = mf.semaphore(2), 0, 0
        local ts = {}
        for i = 1, 6 do
            ts[i] = mf.spawn(function()
                sem:wait()
                running = running + 1
                peak = math.max(peak, running)
                mf.sleep(3)
                running = running - 1
                sem:post()
            end)
        end
        for i = 1, 6 do ts[i]:wait() end
        assert.equals(2, peak)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.semaphore(-1) end)
        assert.has_error(function() mf.semaphore(1.5) end)
        assert.has_error(function() mf.semaphore(1):post(0) end)
    end)
end)

describe("mf.queue", function()
    it("passes values in order and holds pushers while full", function()
        local q = mf.queue(2)
        local pushed = 0
        local producer = mf.spawn(function()
            for i = 1, 5 do
                assert(q:push(i))
                pushed = i
            end
            q:close()
        end)
        mf.sleep(5)
        assert.equals(2, pushed) -- full at 2
        local seen = {}
        while true do
            local v, err = q:pop(1000)
            if not v then
                assert.equals("closed", err)
                break
            end
            seen[#seen + 1] = v
        end
        assert.are.same({ 1, 2, 3, 4, 5 }, seen)
        assert.is_true(producer:wait())
    end)

    it("times out pops and pushes; a timed-out pop takes no value", function()
        local q = mf.queue(1)
        assert.are.same({ nil, "timeout" }, { q:pop(5) })
        assert.is_true(q:push("a"))
        assert.are.same({ nil, "timeout" }, { q:push("b", 5) })
        assert.equals("a", q:pop())
        assert.is_true(q:push("c"))
        assert.equals(1, q:len())
        assert.equals("c", q:pop())
    end)

    it("wakes waiting pops and pushes at close", function()
        local q = mf.queue(1)
        local popper = mf.spawn(function() return q:pop() end)
        mf.sleep(2)
        q:close()
        assert.are.same({ true, nil, "closed" }, { popper:wait() })
        assert.are.same({ nil, "closed" }, { q:push(1) })
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.queue(0) end)
        assert.has_error(function() mf.queue():push(nil) end)
    end)
end)

describe("mf.task.lua", function()
    it("runs Lua functions side by side as steps of a parallel", function()
        local t0 = mf.now()
        local r = mf.parallel {
            mf.task.lua(function(a) mf.sleep(30) return a * 2, nil, "x" end, 21),
            mf.task.lua(function() mf.sleep(30) return "b" end),
            mf.task.timer(30),
        }:wait()
        assert.is_true(mf.now() - t0 < 60, "ran one after the other")
        assert.equals("success", r[1].state)
        assert.are.same({ n = 3, 42, nil, "x" }, r[1].values)
        assert.equals("b", r[2].values[1])
    end)

    it("fails the step with the error and its traceback when fn raises", function()
        local r = mf.task.lua(function() mf.sleep(1) error("bad step") end):wait()
        assert.equals("task error", r.state)
        assert.matches("thread_spec.lua:%d+: bad step", r.error)
        assert.matches("stack traceback", r.error)
    end)

    it("aborts fn at the step's timeout: its code after the wait never runs", function()
        local after = false
        local r = mf.task.lua { fn = function() mf.sleep(40) after = true end,
                                timeout = 5 }:wait()
        assert.equals("timeout", r.state)
        assert.equals("timeout", r.error)
        mf.sleep(60)
        assert.is_false(after)
    end)

    it("runs in series, each step after the one before", function()
        local order = {}
        mf.series {
            mf.task.lua(function() mf.sleep(2) order[#order + 1] = 1 end),
            mf.task.lua(function() order[#order + 1] = 2 end),
        }:wait()
        assert.are.same({ 1, 2 }, order)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.task.lua(42) end, "mf.task.lua(fn, ...): a function expected")
        assert.has_error(function() mf.task.lua { fn = 1 }:wait() end)
    end)
end)

describe("threads and waits", function()
    it("leave no coroutine, reference or timer behind", function()
        local before = mf.debug.counts()
        for _ = 1, 50 do
            local q, sem = mf.queue(), mf.semaphore()
            local t = mf.spawn(function() sem:wait(1) return q:pop(1) end)
            t:wait()
            mf.task.lua(function() return q:pop(1) end):wait()
        end
        mf.sleep(5)
        collectgarbage()
        local after = mf.debug.counts()
        assert.equals(before.coroutines, after.coroutines)
        assert.equals(before.refs, after.refs)
        assert.equals(before.timers, after.timers)
    end)
end)
