-- mf.graph: a DAG of steps run as one C graph — order and overlap on the
-- loop's clock, results by name, failed nodes skipping their dependents
-- (or not, on_failure = "run"), descriptions refused when made (cycles,
-- unknown names), graphs inside parallels and series, and an aborted wait
-- that leaves nothing behind.
local mf = require "moonflow"

-- A step that notes when it started and ended (loop ms since t0).
local function span(t0, ms)
    return mf.task.lua(function()
        local start = mf.now() - t0
        mf.sleep(ms)
        return start, mf.now() - t0
    end)
end

local function times(r) return r.values[1], r.values[2] end

describe("mf.graph", function()
    it("runs b and c side by side after a, and d after both", function()
        local t0 = mf.now()
        local r = mf.graph {
            a = span(t0, 20),
            b = { span(t0, 40), after = { "a" } },
            c = { span(t0, 40), after = { "a" } },
            d = { span(t0, 10), after = { "b", "c" } },
        }:wait()
        local _, a_end = times(r.a)
        local b_start, b_end = times(r.b)
        local c_start, c_end = times(r.c)
        local d_start = times(r.d)
        assert.is_true(b_start >= a_end and c_start >= a_end)
        assert.is_true(b_start < c_end and c_start < b_end) -- they overlap
        assert.is_true(d_start >= b_end and d_start >= c_end)
        for _, name in ipairs { "a", "b", "c", "d" } do
            assert.equals("success", r[name].state)
        end
        assert.is_nil(r[1]) -- results by name only
    end)

    it("gives a series node its array and takes after as a single name", function()
        local r = mf.graph {
            first = mf.task.timer(1),
            rest = { mf.series { mf.task.timer(1), mf.task.lua(function() return "x" end) },
                     after = "first" },
        }:wait()
        assert.equals(2, #r.rest)
        assert.equals("x", r.rest[2].values[1])
    end)

    it("skips what comes after a failed node and runs the rest", function()
        local ran = {}
        local function mark(name)
            return mf.task.lua(function() ran[name] = true end)
        end
        local r = mf.graph {
            bad = mf.task.lua(function() error("boom") end),
            next = { mark("next"), after = "bad" },
            last = { mark("last"), after = "next" },
            other = mark("other"),
            timed = mf.task.timer(50, { timeout = 5 }),
            late = { mark("late"), after = "timed" },
        }:wait()
        assert.equals("task error", r.bad.state)
        assert.matches("boom", r.bad.error)
        assert.same({ state = "skipped", error = "skipped: 'bad' failed" }, r.next)
        assert.same({ state = "skipped", error = "skipped: 'bad' failed" }, r.last)
        assert.equals("timeout", r.timed.state)
        assert.equals("skipped: 'timed' failed", r.late.error)
        assert.same({ other = true }, ran)
    end)

    it("runs dependents anyway with on_failure = \"run\"", function()
        local r = mf.graph({
            bad = mf.task.lua(function() error("boom") end),
            next = { mf.task.lua(function() return "ran" end), after = "bad" },
        }, { on_failure = "run" }):wait()
        assert.equals("task error", r.bad.state)
        assert.equals("ran", r.next.values[1])
    end)

    it("refuses a cycle and an unknown after name when it is made", function()
        local t = mf.task.timer(1)
        local ok, err = pcall(mf.graph, {
            a = { t, after = "c" }, b = { t, after = "a" }, c = { t, after = "b" },
            d = t,
        })
        assert.is_false(ok)
        assert.matches("a cycle: [abc] %-> [abc] %-> [abc] %-> [abc]", err)
        ok, err = pcall(mf.graph, { a = { t, after = "a" } })
        assert.matches("a cycle: a %-> a", err)
        ok, err = pcall(mf.graph, { a = t, b = { t, after = { "a", "nope" } } })
        assert.matches("node 'b' comes after 'nope', which is not a node of this graph",
            err, 1, true)
    end)

    it("raises on malformed descriptions", function()
        local t = mf.task.timer(1)
        assert.has_error(function() mf.graph(nil) end)
        assert.has_error(function() mf.graph { t } end, "mf.graph: node names are strings, got a number key")
        assert.has_error(function() mf.graph { a = 5 } end)
        assert.has_error(function() mf.graph { a = { t, aftr = "b" } } end)
        assert.has_error(function() mf.graph { a = { t, t } } end, "mf.graph: node 'a': unknown field '2'")
        assert.has_error(function() mf.graph { a = { t, after = { 1 } } } end)
        -- an after list with other keys or holes would lose edges
        local bad = "mf.graph: node 'b': after is a name or a list of them"
        assert.has_error(function() mf.graph { a = t, b = { t, after = { x = "a" } } } end, bad)
        assert.has_error(function() mf.graph { a = t, b = { t, after = { "a", y = "a" } } } end, bad)
        assert.has_error(function() mf.graph { a = t, c = t, b = { t, after = { "a", nil, "c" } } } end, bad)
        assert.has_error(function() mf.graph({ a = t }, { on_failure = "maybe" }) end)
        assert.has_error(function() mf.graph({ a = t }, { nope = 1 }) end)
        assert.has_error(function() mf.graph { a = mf.task.timer(1, { after = "b" }), b = t } end)
    end)

    it("is a step inside a parallel and a series, and takes graphs as nodes", function()
        local t0 = mf.now()
        local r = mf.parallel {
            mf.graph {
                x = span(t0, 20),
                y = { mf.graph { inner = span(t0, 5) }, after = "x" },
            },
            span(t0, 20),
        }:wait()
        local _, x_end = times(r[1].x)
        local other_start = times(r[2])
        assert.is_true(other_start < x_end) -- the parallel's branches overlap
        assert.is_true(times(r[1].y.inner) >= x_end)
        local s = mf.series { mf.graph { g = mf.task.timer(1) }, mf.task.timer(1) }:wait()
        assert.equals("success", s[1].g.state)
        assert.same({}, mf.graph {}:wait())
    end)

    it("leaves nothing behind when its waiter is aborted mid-run", function()
        local before = mf.debug.counts()
        local finished = {}
        local r = mf.task.lua {
            fn = function()
                return mf.graph {
                    a = mf.task.timer(5),
                    b = { mf.task.lua { fn = function() mf.sleep(1000) end,
                                        finally = function(how) finished.b = how end },
                          after = "a" },
                    c = { mf.task.lua { fn = function() end,
                                        finally = function(how) finished.c = how end },
                          after = "b" },
                }:wait()
            end,
            timeout = 30,
        }:wait()
        assert.equals("timeout", r.state)
        mf.sleep(5)
        assert.equals("aborted", finished.b)
        assert.is_nil(finished.c) -- skipped: never started
        local after = mf.debug.counts()
        assert.equals(before.flows, after.flows)
        assert.equals(before.refs, after.refs)
        assert.equals(before.coroutines, after.coroutines)
    end)

    it("can be waited on again", function()
        local g = mf.graph { a = mf.task.timer(1), b = { mf.task.timer(1), after = "a" } }
        assert.equals("success", g:wait().b.state)
        assert.equals("success", g:wait().b.state)
    end)
end)
