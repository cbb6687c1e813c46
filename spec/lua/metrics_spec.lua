-- User metrics: mf.metrics.counter/gauge/histogram in this state's own
-- registry (a `moonflow test` host has no server's), their values, the
-- text Prometheus scrapes, and misuse raising with the method's name.
local mf = require "moonflow"

-- The lines of the exposition that start with prefix, in order.
local function lines(prefix)
    local out = {}
    for line in mf.metrics.text():gmatch("[^\n]+") do
        if line:sub(1, #prefix) == prefix then out[#out + 1] = line end
    end
    return out
end

describe("mf.metrics", function()
    it("counts by label values, numbers and strings alike", function()
        local c = mf.metrics.counter("spec_hits_total", "Hits by route.",
                                     { "route", "status" })
        assert.is_true(c:inc(1, { "/a", 200 }))
        assert.is_true(c:inc(2, { "/a", "200" }))
        assert.is_true(c:inc(nil, { "/b", 404 }))
        assert.are.equal(3, c:value({ "/a", 200 }))
        assert.are.equal(1, c:value({ "/b", "404" }))
        assert.are.equal(0, c:value({ "/c", 500 }))
        assert.truthy(mf.metrics.text():find(table.concat({
            "# HELP spec_hits_total Hits by route.",
            "# TYPE spec_hits_total counter",
            'spec_hits_total{route="/a",status="200"} 3',
            'spec_hits_total{route="/b",status="404"} 1',
            'spec_hits_total{route="/c",status="500"} 0', "",
        }, "\n"), 1, true))
    end)

    it("gives the same object for the same declaration", function()
        local a = mf.metrics.gauge("spec_same", "One.", { "k" })
        assert.are.equal(a, mf.metrics.gauge("spec_same", "Other help.", { "k" }))
    end)

    it("sets, raises and lowers a gauge", function()
        local g = mf.metrics.gauge("spec_open", "Open things.")
        assert.is_true(g:set(5))
        assert.is_true(g:dec(2))
        assert.is_true(g:inc())
        assert.is_true(g:inc(0.5))
        assert.are.equal(4.5, g:value())
        assert.are.same({ "spec_open 4.5" }, lines("spec_open "))
    end)

    it("observes into cumulative buckets with a sum and a count", function()
        local h = mf.metrics.histogram("spec_wait_seconds", "Waits.", { "kind" },
                                       { 0.1, 1 })
        h:observe(0.05, { "x" })
        h:observe(0.5, { "x" })
        h:observe(7, { "x" })
        local count, sum = h:value({ "x" })
        assert.are.equal(3, count)
        assert.are.equal(7.55, sum)
        assert.are.same({
            'spec_wait_seconds_bucket{kind="x",le="0.1"} 1',
            'spec_wait_seconds_bucket{kind="x",le="1"} 2',
            'spec_wait_seconds_bucket{kind="x",le="+Inf"} 3',
            'spec_wait_seconds_sum{kind="x"} 7.55',
            'spec_wait_seconds_count{kind="x"} 3',
        }, lines("spec_wait_seconds_"))
        local d = mf.metrics.histogram("spec_default_seconds", "Defaults.")
        d:observe(0.003)
        assert.are.equal(12, #lines("spec_default_seconds_bucket"))
        assert.are.same({ 'spec_default_seconds_bucket{le="0.005"} 1' },
                        lines('spec_default_seconds_bucket{le="0.005"}'))
    end)

    it("escapes label values in the text", function()
        local c = mf.metrics.counter("spec_odd_total", "Odd.", { "v" })
        c:inc(1, { 'a"b\\c\nd' })
        assert.are.same({ 'spec_odd_total{v="a\\"b\\\\c\\nd"} 1' },
                        lines("spec_odd_total{"))
    end)

    it("answers nil and the reason when a family is full", function()
        local c = mf.metrics.counter("spec_many_total", "Many.", { "id" })
        for i = 1, 10000 do assert.is_true(c:inc(1, { i })) end
        local ok, err = c:inc(1, { "one more" })
        assert.is_nil(ok)
        assert.matches("too many series", err)
        assert.is_true(c:inc(1, { 1 })) -- a known one still counts
        assert.are.equal(2, c:value({ 1 }))
    end)

    it("raises on misuse, naming the method", function()
        local c = mf.metrics.counter("spec_misuse_total", "M.", { "a", "b" })
        local h = mf.metrics.histogram("spec_misuse_seconds", "M.")
        local g = mf.metrics.gauge("spec_misuse", "M.")
        assert.has_error(function() c:inc(-1, { "x", "y" }) end,
            "metric:inc: a counter only goes up (a step >= 0 expected, got -1)")
        assert.has_error(function() c:inc(1, { "x" }) end,
            "metric:inc: 2 label values expected (a list), got another count")
        assert.has_error(function() c:inc(1) end,
            "metric:inc: 2 label values expected (a list), got no value")
        assert.has_error(function() c:inc(1, { "x", {} }) end,
            "metric:inc: label value 2: a string or a number expected, got table")
        assert.has_error(function() c:inc("1", { "x", "y" }) end,
            "metric:inc: a number expected, got string")
        assert.has_error(function() c:set(1, { "x", "y" }) end,
            "metric:set: not for a counter")
        assert.has_error(function() h:inc() end,
            "metric:inc: not for a histogram (observe)")
        assert.has_error(function() g:observe(1) end,
            "metric:observe: not for a gauge")
        assert.has_error(function() g:set(1, { "x" }) end,
            "metric:set: this metric has no labels")
        assert.has_error(function() c.inc({}, 1) end,
            "metric:inc: call it with ':' on a metric")
        assert.has_error(function() mf.metrics.gauge("spec_misuse_total", "x") end,
            "mf.metrics: spec_misuse_total: already declared as a counter "
            .. "with 2 label(s) of other names, types or buckets")
        assert.has_error(function() mf.metrics.counter("1bad", "x") end,
            'mf.metrics: metric name "1bad": [a-zA-Z_:][a-zA-Z0-9_:]* expected')
        assert.has_error(function() mf.metrics.counter("x_total", "x", { "a-b" }) end,
            'mf.metrics: x_total: label "a-b": [a-zA-Z_][a-zA-Z0-9_]* expected, '
            .. "not starting with __")
        assert.has_error(function() mf.metrics.histogram("h_seconds", "x", nil, { 2, 1 }) end,
            "mf.metrics: h_seconds: buckets: finite bounds in increasing order "
            .. "expected (bucket 2)")
        assert.has_error(function() mf.metrics.histogram("h_seconds", "x", nil, {}) end,
            "mf.metrics: buckets: 1 to 32 bounds expected, got 0")
        assert.has_error(function() mf.metrics.counter("x_total", "x", { 1 }) end,
            "mf.metrics: label names[1]: a string expected, got number")
    end)
end)
