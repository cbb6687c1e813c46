-- The Kafka consumer object (k:consumer) against librdkafka's mock cluster
-- (MF_KAFKA_BROKERS, started by run_specs.py): what k:produce wrote comes
-- back through c:messages() and c:poll, offsets, pause/resume/seek, lag,
-- rebalance callbacks with two members of one group, misuse raising.
local mf = require "moonflow"

local brokers = assert(os.getenv("MF_KAFKA_BROKERS"))
local odd = "http://127.0.0.1:" .. assert(os.getenv("MF_ODD_PORT"))

-- The mock coordinator waits session.timeout.ms - 1 s for members to
-- rejoin: keep it short.
local quick = { ["session.timeout.ms"] = 3000, ["heartbeat.interval.ms"] = 300 }

local function opts(t)
    for key, value in pairs(quick) do
        if t[key] == nil then t[key] = value end
    end
    return t
end

describe("mf.kafka consumer", function()
    local k
    local seq = 0

    -- A topic of its own for each case, made by the mock cluster.
    local function fresh(parts)
        seq = seq + 1
        local name = string.format("lc-%d-%d", seq, math.random(1e9))
        local r = assert(mf.http.get(odd .. "/kafka?cmd=topic+" .. name ..
                                     "+" .. parts))
        assert.equals(204, r.status)
        return name
    end

    local function produce(t, n, from)
        for i = from or 1, (from or 1) + n - 1 do
            assert(k:produce { topic = t, partition = 0, value = "v" .. i,
                               key = "k" .. i })
        end
    end

    setup(function()
        k = mf.kafka { brokers = brokers }
    end)

    it("hands out what k:produce wrote, in order, one message at a time",
       function()
        local t = fresh(1)
        assert(k:produce { topic = t, value = "v1", key = "k1",
                           headers = { { "trace", "abc" }, { "empty" } },
                           timestamp = 1700000000123 })
        produce(t, 19, 2)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t },
                                    batch = 7 })
        local got, first = {}, nil
        for m in c:messages(5000) do
            first = first or m
            got[#got + 1] = m.value
            if #got == 20 then break end
        end
        assert.equals(20, #got)
        for i = 1, 20 do assert.equals("v" .. i, got[i]) end
        assert.equals(t, first.topic)
        assert.equals(0, first.partition)
        assert.equals(0, first.offset)
        assert.equals("k1", first.key)
        assert.equals(1700000000123, first.timestamp)
        assert.same({ { "trace", "abc" }, { "empty" } }, first.headers)
        assert.same({ { topic = t, partition = 0 } }, c:assignment())
        assert.is_true(c:close())
        assert.is_true(c:close()) -- idempotent
        assert.same({}, c:assignment())
    end)

    it("ends messages() after wait_ms with nothing, and at close", function()
        local t = fresh(1)
        produce(t, 3)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t } })
        local n, last = 0, nil
        for _ in c:messages(5000) do
            n = n + 1
            last = mf.now()
        end
        assert.equals(3, n)
        assert.is_true(mf.now() - last >= 5000)
        assert.is_true(c:close())
        local after = 0
        for _ in c:messages() do after = after + 1 end
        assert.equals(0, after)
    end)

    it("counts messages()' wait from the first assignment: a fresh "
       .. "consumer gets what is there", function()
        local t = fresh(1)
        produce(t, 3)
        local assigned
        local c = k:consumer(opts { group = "g-" .. t, topics = { t },
                                    on_assign = function()
                                        assigned = assigned or mf.now()
                                    end })
        local start = mf.now()
        local got = {}
        for m in c:messages(300) do got[#got + 1] = m.value end
        assert.are.same({ "v1", "v2", "v3" }, got)
        -- The group join alone takes longer than the wait.
        assert.is_true(assigned - start > 300, assigned - start)
        assert.is_true(mf.now() - assigned >= 300)
        assert.is_true(c:close())
    end)

    it("ends a messages() loop waiting with no limit when another "
       .. "coroutine closes the consumer", function()
        local t = fresh(1)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t } })
        local closed
        mf.timer.at(1500, function() closed = c:close() end)
        local n = 0
        for _ in c:messages() do n = n + 1 end -- only the close ends it
        assert.equals(0, n)
        local deadline = mf.now() + 10000
        while closed == nil and mf.now() < deadline do mf.sleep(10) end
        assert.is_true(closed)
        assert.has_error(function() c:lag(t, 0) end,
                         "c:lag: the consumer is closed")
    end)

    it("stores a message's offset when the loop asks for the next one, "
       .. "or at close", function()
        local t = fresh(1)
        produce(t, 10)
        local group = "g-" .. t
        local c = k:consumer(opts { group = group, topics = { t } })
        local seen = 0
        for m in c:messages(5000) do
            seen = seen + 1
            if m.value == "v5" then break end
        end
        assert.equals(5, seen)
        assert.is_true(c:close()) -- v5 was had: commits v1..v5, not v6..
        local again = k:consumer(opts { group = group, topics = { t } })
        local m = again:messages(10000)()
        assert.equals("v6", m.value)
        assert.equals(5, m.offset)
        assert.is_true(again:close())
    end)

    it("polls batches, commits, reports lag, pauses, resumes and seeks",
       function()
        local t = fresh(1)
        produce(t, 30)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t },
                                    ["enable.auto.commit"] = false })
        local got = {}
        local deadline = mf.now() + 20000
        while #got < 10 and mf.now() < deadline do
            local batch = assert(c:poll(10 - #got, 500))
            for _, m in ipairs(batch) do got[#got + 1] = m end
        end
        assert.equals(10, #got)
        assert.equals("v10", got[10].value)
        local lag = assert(c:lag(t, 0))
        assert.equals(10, lag.position)
        assert.equals(30, lag.high)
        assert.equals(20, lag.lag)
        assert.equals(-1, lag.committed)
        assert.is_true(c:commit())
        assert.equals(10, c:lag(t, 0).committed)
        assert.is_true(c:commit { { topic = t, partition = 0, offset = 7 } })
        assert.equals(7, c:lag(t, 0).committed)
        local none, err = c:lag(t, 9)
        assert.is_nil(none)
        assert.matches("not assigned", err)

        local part = { { topic = t, partition = 0 } }
        assert.is_true(c:pause(part))
        assert.same({}, assert(c:poll(10, 500)))
        assert.is_true(c:resume(part))
        local batch = assert(c:poll(5, 5000))
        assert.equals("v11", batch[1].value)

        assert.is_true(c:seek { { topic = t, partition = 0,
                                  offset = "beginning" } })
        batch = assert(c:poll(1, 5000))
        assert.equals("v1", batch[1].value)
        assert.is_true(c:seek { { topic = t, partition = 0, offset = 25 } })
        batch = assert(c:poll(1, 5000))
        assert.equals("v26", batch[1].value)
        local count, last = c:errors()
        assert.equals(0, count)
        assert.is_nil(last)
        assert.is_true(c:close())
    end)

    it("calls on_assign and on_revoke as a second member comes and goes",
       function()
        local t = fresh(2)
        local events = {}
        local function member(name)
            return k:consumer(opts {
                group = "g-" .. t, topics = { t },
                on_assign = function(parts)
                    events[#events + 1] = name .. " +" .. #parts
                end,
                on_revoke = function(parts)
                    events[#events + 1] = name .. " -" .. #parts
                end,
            })
        end
        local function until_assigned(want, ...)
            local cs = { ... }
            local deadline = mf.now() + 30000
            while mf.now() < deadline do
                local ok = true
                for i, c in ipairs(cs) do
                    c:poll(10, 100)
                    ok = ok and #c:assignment() == want[i]
                end
                if ok then return true end
            end
            return false
        end
        local a = member("a")
        assert.is_true(until_assigned({ 2 }, a))
        local b = member("b")
        assert.is_true(until_assigned({ 1, 1 }, a, b))
        assert.is_true(b:close())
        assert.is_true(until_assigned({ 2 }, a))
        assert.is_true(a:close())
        mf.sleep(10) -- the deferred callbacks of the last revocation
        local seen = table.concat(events, ",")
        assert.equals("a +2", events[1])
        assert.matches("b %+1", seen)
        assert.matches("b %-1", seen)
        assert.equals("a -2", events[#events])
    end)

    it("closes a consumer the collector takes: it leaves the group, and "
       .. "the other member gets its partitions", function()
        local t = fresh(2)
        local group = "g-" .. t
        local function assigned(c, want)
            local deadline = mf.now() + 30000
            while mf.now() < deadline do
                c:poll(10, 100)
                if #c:assignment() == want then return true end
            end
            return false
        end
        local a = k:consumer(opts { group = group, topics = { t } })
        assert.is_true(assigned(a, 2))
        local dropped = k:consumer(opts { group = group, topics = { t } })
        local deadline = mf.now() + 30000
        while mf.now() < deadline and #dropped:assignment() == 0 do
            dropped:poll(10, 100)
            a:poll(10, 100)
        end
        assert.equals(1, #dropped:assignment())
        dropped = nil
        collectgarbage()
        collectgarbage()
        assert.is_true(assigned(a, 2))
        assert.is_true(a:close())
    end)

    it("tells on_revoke a lost assignment from a hand-over, then gets the "
       .. "partitions back", function()
        local t = fresh(2)
        local revokes = {}
        local assigns = 0
        local c = k:consumer(opts {
            group = "g-" .. t, topics = { t },
            on_assign = function() assigns = assigns + 1 end,
            on_revoke = function(parts, lost)
                revokes[#revokes + 1] = { n = #parts, lost = lost }
            end,
        })
        local function poll_until(done)
            local deadline = mf.now() + 30000
            while mf.now() < deadline do
                c:poll(10, 100)
                if done() then return true end
            end
            return false
        end
        assert.is_true(poll_until(function() return assigns == 1 end))
        -- The coordinator forgets the member: its next heartbeat is
        -- refused, and librdkafka drops the assignment as lost.
        local r = assert(mf.http.get(odd .. "/kafka?cmd=errors+Heartbeat+"
                                     .. "UNKNOWN_MEMBER_ID"))
        assert.equals(204, r.status)
        assert.is_true(poll_until(function()
            return assigns == 2 and #c:assignment() == 2
        end))
        assert.equals(1, #revokes)
        assert.same({ n = 2, lost = true }, revokes[1])
        assert.is_true(c:close())
        mf.sleep(10) -- the deferred callback of the closing revocation
        assert.same({ n = 2, lost = false }, revokes[2])
    end)

    it("logs and ignores a raise in a rebalance callback", function()
        local t = fresh(1)
        produce(t, 2)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t },
                                    on_assign = function() error("boom") end })
        local n = 0
        for _ in c:messages(6000) do n = n + 1 end
        assert.equals(2, n)
        assert.is_true(c:close())
    end)

    it("raises on misuse, naming the argument or key", function()
        assert.has_error(function() k:consumer { topics = { "x" } } end,
                         "k:consumer: group.id: required")
        assert.has_error(function() k:consumer { group = "g" } end,
                         "k:consumer: topics must be a non-empty array of "
                         .. "topic names")
        assert.has_error(function()
            k:consumer { group = "g", topics = { "x" }, batch = 0 }
        end, "k:consumer: batch must be an integer from 1 to 100000")
        local ok, err = pcall(k.consumer, k, { group = "g", topics = { "x" },
                                               ["no.such.thing"] = 1 })
        assert.is_false(ok)
        assert.matches("no.such.thing", err, 1, true)
        local t = fresh(1)
        local c = k:consumer(opts { group = "g-" .. t, topics = { t } })
        assert.has_error(function() c:poll(0) end)
        assert.has_error(function() c:pause({}) end)
        assert.has_error(function() c:seek { { topic = t, partition = 0,
                                               offset = "later" } } end)
        assert.has_error(function() c:commit { { topic = t, partition = 0,
                                                 offset = -5 } } end)
        assert.is_true(c:close())
        assert.has_error(function() c:poll() end,
                         "c:poll: the consumer is closed")
    end)
end)
