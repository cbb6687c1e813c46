-- Explicit flows: mf.series, mf.parallel, mf.task.timer, callbacks that
-- push tasks, per-task timeouts, and the one-yield promise of :wait().
local mf = require "moonflow"

describe("mf.series", function()
    it("runs its tasks in order and returns one result per task", function()
        local order = {}
        local function note(name)
            return function() order[#order + 1] = name end
        end
        local r = mf.series {
            mf.task.timer(20, { callback = note("a") }),
            mf.task.timer(1, { callback = note("b") }),
            mf.task.timer(5, { callback = note("c") }),
        }:wait()
        assert.are.same({ "a", "b", "c" }, order)
        assert.are.equal(3, #r)
        for i = 1, 3 do assert.are.equal("success", r[i].state) end
        assert.is_nil(r[1].error)
    end)

    it("takes as long as the sum of its steps", function()
        local t0 = mf.now()
        mf.series { mf.task.timer(15), mf.task.timer(15) }:wait()
        assert.is_true(mf.now() - t0 >= 30)
    end)

    it("yields once: the C scheduler runs every step", function()
        local before = mf.debug.counts().resumes
        mf.series {
            mf.task.timer(1), mf.task.timer(1), mf.task.timer(1),
            mf.parallel { mf.task.timer(1), mf.task.timer(2) },
            mf.task.timer(1),
        }:wait()
        assert.are.equal(before + 1, mf.debug.counts().resumes)
    end)

    it("returns an empty table for an empty series", function()
        assert.are.same({}, mf.series {}:wait())
    end)

    it("nests a series inside a series as an array", function()
        local r = mf.series {
            mf.task.timer(1),
            mf.series { mf.task.timer(1), mf.task.timer(1) },
        }:wait()
        assert.are.equal(2, #r)
        assert.are.equal("success", r[1].state)
        assert.are.equal(2, #r[2])
        assert.are.equal("success", r[2][2].state)
    end)

    it("raises when a step is not a task, series or parallel", function()
        assert.has_error(function() mf.series { 42 } end)
        assert.has_error(function() mf.series "x" end)
    end)
end)

describe("mf.parallel", function()
    it("runs branches side by side: as long as the longest", function()
        -- In turn they would take at least 600 ms (a timer never fires
        -- early); side by side about 200, with room for a loaded machine.
        local t0 = mf.now()
        local r = mf.parallel {
            mf.task.timer(200), mf.task.timer(200), mf.task.timer(200),
        }:wait()
        local took = mf.now() - t0
        assert.is_true(took >= 200 and took < 400, "took " .. took)
        assert.are.equal(3, #r)
    end)

    it("returns per-branch results in branch order, not finish order", function()
        local finished = {}
        local r = mf.parallel {
            mf.task.timer(30, { callback = function()
                finished[#finished + 1] = 1
            end }),
            mf.task.timer(1, { callback = function()
                finished[#finished + 1] = 2
            end }),
        }:wait()
        assert.are.same({ 2, 1 }, finished)
        assert.are.equal("success", r[1].state)
        assert.are.equal("success", r[2].state)
    end)

    it("nests parallels and series to any depth", function()
        local r = mf.series {
            mf.task.timer(1),
            mf.parallel {
                mf.task.timer(2),
                mf.series {
                    mf.task.timer(1),
                    mf.parallel { mf.task.timer(1), mf.task.timer(3) },
                },
                mf.parallel { mf.parallel { mf.task.timer(1) } },
            },
        }:wait()
        assert.are.equal(2, #r)
        local p = r[2]
        assert.are.equal(3, #p)
        assert.are.equal("success", p[1].state)          -- a lone task
        assert.are.equal(2, #p[2])                        -- a series' array
        assert.are.equal(2, #p[2][2])                     -- a parallel in it
        assert.are.equal("success", p[2][2][2].state)
        assert.are.equal("success", p[3][1][1].state)     -- parallel of parallel
    end)

    it("returns an empty table for an empty parallel", function()
        assert.are.same({}, mf.parallel {}:wait())
    end)
end)

describe("mf.task.timer", function()
    it("waits on its own and returns its result", function()
        local r = mf.task.timer(5):wait()
        assert.are.equal("success", r.state)
    end)

    it("waits alone, without building a flow", function()
        local before = mf.debug.counts()
        local during
        mf.timer.at(0, function() during = mf.debug.counts() end)
        assert.are.equal("success", mf.task.timer(10):wait().state)
        assert.are.equal(before.flows, during.flows)
        assert.are.equal(before.tasks + 1, during.tasks)
        assert.are.equal(before.tasks, mf.debug.counts().tasks)
    end)

    it("ends with state 'timeout' when its timeout comes first", function()
        local t0 = mf.now()
        local r = mf.task.timer(1000, { timeout = 20 }):wait()
        assert.are.equal("timeout", r.state)
        assert.are.equal("timeout", r.error)
        assert.is_true(mf.now() - t0 < 500)
    end)

    it("lets the series go on after a timed-out task", function()
        local r = mf.series {
            mf.task.timer(500, { timeout = 10 }),
            mf.task.timer(1),
        }:wait()
        assert.are.equal("timeout", r[1].state)
        assert.are.equal("success", r[2].state)
    end)

    it("raises on a bad duration or option", function()
        assert.has_error(function() mf.task.timer("x") end)
        assert.has_error(function() mf.task.timer(1, 5) end)
        assert.has_error(function() mf.task.timer(1, { timeout = "x" }):wait() end)
        assert.has_error(function() mf.task.timer(-1):wait() end)
    end)
end)

describe("per-task callbacks", function()
    it("receive the task's result and the flow", function()
        local seen
        mf.series {
            mf.task.timer(1, { callback = function(result, flow)
                seen = { state = result.state, flow = type(flow) }
            end }),
        }:wait()
        assert.are.same({ state = "success", flow = "userdata" }, seen)
    end)

    it("push more tasks onto their series (dynamic flows)", function()
        local n = 0
        local function again(result, flow)
            n = n + 1
            if n < 4 then flow:push(mf.task.timer(1, { callback = again })) end
        end
        local r = mf.series { mf.task.timer(1, { callback = again }) }:wait()
        assert.are.equal(4, n)
        assert.are.equal(4, #r)
        assert.are.equal("success", r[4].state)
    end)

    it("may push a whole parallel, whose results land in the series", function()
        local r = mf.series {
            mf.task.timer(1, { callback = function(_, flow)
                flow:push(mf.parallel { mf.task.timer(1), mf.task.timer(2) })
            end }),
        }:wait()
        assert.are.equal(2, #r)
        assert.are.equal(2, #r[2])
    end)

    it("push onto the branch's series inside a parallel", function()
        local r = mf.parallel {
            mf.series { mf.task.timer(1, { callback = function(_, flow)
                flow:push(mf.task.timer(1))
            end }) },
            mf.task.timer(1),
        }:wait()
        assert.are.equal(2, #r[1])
    end)

    it("cancel the rest of their series: 'canceled', no callbacks", function()
        local ran = false
        local t0 = mf.now()
        local r = mf.series {
            mf.task.timer(1, { callback = function(_, flow) flow:cancel() end }),
            mf.task.timer(2000, { callback = function() ran = true end }),
            mf.parallel { mf.task.timer(2000) },
        }:wait()
        assert.is_true(mf.now() - t0 < 1000)
        assert.are.equal("success", r[1].state)
        assert.are.equal("canceled", r[2].state)
        assert.are.equal("canceled", r[2].error)
        assert.are.equal("canceled", r[3][1].state)
        assert.is_false(ran)
    end)

    it("cancel only their own series, not the parallel around it", function()
        local r = mf.series {
            mf.parallel {
                mf.series {
                    mf.task.timer(1, { callback = function(_, flow)
                        flow:cancel()
                    end }),
                    mf.task.timer(2000),
                },
                mf.task.timer(20),
            },
            mf.task.timer(1),
        }:wait()
        assert.are.equal("canceled", r[1][1][2].state)
        assert.are.equal("success", r[1][2].state)
        assert.are.equal("success", r[2].state)
    end)

    it("cannot push after canceling", function()
        assert.has_error(function()
            mf.series { mf.task.timer(1, { callback = function(_, flow)
                flow:cancel()
                flow:push(mf.task.timer(1))
            end }) }:wait()
        end)
    end)

    it("cannot keep the flow past the callback", function()
        local kept
        mf.series { mf.task.timer(1, { callback = function(_, flow)
            kept = flow
        end }) }:wait()
        assert.has_error(function() kept:push(mf.task.timer(1)) end,
                                          "flow:push outside the task's callback")
    end)

    it("cannot wait: they are plain calls", function()
        local ok, err = pcall(function()
            mf.series { mf.task.timer(1, { callback = function()
                mf.sleep(1)
            end }) }:wait()
        end)
        assert.is_false(ok)
        assert.matches("not in a moonflow coroutine", err)
    end)

    it("fail the flow when they raise: the rest is canceled, wait raises", function()
        local ran = false
        local t0 = mf.now()
        local ok, err = pcall(function()
            mf.series {
                mf.parallel {
                    mf.task.timer(1, { callback = function() error("bad callback") end }),
                    mf.task.timer(2000),
                },
                mf.task.timer(1, { callback = function() ran = true end }),
            }:wait()
        end)
        assert.is_false(ok)
        assert.matches("bad callback", err)
        assert.matches("stack traceback", err)
        assert.is_false(ran)
        assert.is_true(mf.now() - t0 < 1000)
    end)
end)
