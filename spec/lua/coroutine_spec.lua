-- Waits inside plain coroutines (coroutine.create/resume/wrap), as
-- OpenResty allows: the wait parks the moonflow coroutine at the root of
-- the chain and its results come back into the waiting call; plain
-- yields, errors and statuses behave as in Lua.
local mf = require "moonflow"

local http = "http://127.0.0.1:" .. assert(os.getenv("MF_HTTP_PORT"))

describe("a plain coroutine", function()
    it("waits inside coroutine.wrap and yields its own values between", function()
        local gen = coroutine.wrap(function()
            for i = 1, 3 do
                mf.sleep(2)
                coroutine.yield(i)
            end
            return "end"
        end)
        assert.are.same({ 1, 2, 3, "end" }, { gen(), gen(), gen(), gen() })
    end)

    it("waits two levels down, with values passed in and out", function()
        local co = coroutine.create(function(a)
            local inner = coroutine.wrap(function()
                mf.sleep(2)
                coroutine.yield("inner")
                mf.sleep(2)
                return "inner done"
            end)
            local b = coroutine.yield(a .. inner())
            return b, inner()
        end)
        assert.are.same({ true, "a:inner" }, { coroutine.resume(co, "a:") })
        assert.equals("suspended", coroutine.status(co))
        assert.are.same({ true, "b", "inner done" }, { coroutine.resume(co, "b") })
        assert.equals("dead", coroutine.status(co))
    end)

    it("gets the results of tasks, flows and queues", function()
        local r = coroutine.wrap(function()
            local got = assert(mf.http.get(http .. "/"))
            local flow = mf.series { mf.task.timer(1), mf.task.timer(1) }:wait()
            local q = mf.queue()
            mf.spawn(function() mf.sleep(2) q:push("queued") end)
            return got.status, #flow, q:pop(1000)
        end)
        assert.are.same({ 200, 2, "queued" }, { r() })
    end)

    it("reports an error after a wait as coroutine.resume and wrap do", function()
        local co = coroutine.create(function() mf.sleep(1) error("late boom") end)
        local ok, err = coroutine.resume(co)
        assert.is_false(ok)
        assert.matches("late boom", err)
        assert.has_error(coroutine.wrap(function() mf.sleep(1) error("wrapped", 0) end),
            "wrapped")
    end)

    it("times out a wait inside it", function()
        local q = mf.queue()
        assert.are.same({ nil, "timeout" },
            { coroutine.wrap(function() return q:pop(5) end)() })
    end)
end)
