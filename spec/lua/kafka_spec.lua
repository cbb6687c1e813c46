-- mf.kafka's producer side against the mock cluster run_specs.py starts
-- (MF_KAFKA_BROKERS: three brokers, ids 1..3), driven through GET
-- /kafka?cmd=COMMAND on MF_ODD_PORT (topic, down, up, leader ...).
local mf = require "moonflow"

local brokers = assert(os.getenv("MF_KAFKA_BROKERS"))
local odd = "http://127.0.0.1:" .. assert(os.getenv("MF_ODD_PORT"))

local function cluster(cmd)
    local r = assert(mf.http.get(odd .. "/kafka?cmd=" .. cmd:gsub(" ", "+")))
    assert.are.equal(204, r.status)
end

local seq = 0
local function topic(parts)
    seq = seq + 1
    local name = ("spec-%d-%d"):format(seq, os.time())
    cluster(("topic %s %d"):format(name, parts))
    return name
end

local k = mf.kafka { brokers = brokers }

describe("mf.kafka", function()
    it("gives the same object for the same properties, in any order", function()
        local a = mf.kafka { brokers = brokers, ["linger.ms"] = 5, acks = "all" }
        local b = mf.kafka { acks = "all", ["linger.ms"] = "5",
                             ["bootstrap.servers"] = brokers }
        assert.are.equal(a, b)
        assert.are.equal(k, mf.kafka { brokers = brokers })
        assert.are_not.equal(k, a)
        assert.are.equal("moonflow.kafka", getmetatable(k))
    end)

    it("takes numbers and booleans as property values", function()
        local a = mf.kafka { brokers = brokers, ["linger.ms"] = 2,
                             ["enable.idempotence"] = false }
        assert.are.equal(a, mf.kafka { brokers = brokers, ["linger.ms"] = "2",
                                       ["enable.idempotence"] = "false" })
    end)

    it("raises naming a bad property, a bad value or a missing broker list", function()
        local ok, err = pcall(mf.kafka, { brokers = brokers, ["no.such.thing"] = 1 })
        assert.is_false(ok)
        assert.truthy(err:find("no.such.thing", 1, true))
        ok, err = pcall(mf.kafka, { brokers = brokers, acks = "sometimes" })
        assert.is_false(ok)
        assert.truthy(err:find("acks", 1, true))
        ok, err = pcall(mf.kafka, { ["linger.ms"] = 1 })
        assert.is_false(ok)
        assert.truthy(err:find("bootstrap.servers: required", 1, true))
        ok, err = pcall(mf.kafka, { brokers = brokers, ["linger.ms"] = {} })
        assert.is_false(ok)
        assert.truthy(err:find("linger.ms", 1, true))
        assert.has_error(function() mf.kafka("127.0.0.1:9092") end)
        assert.has_error(function()
            mf.kafka { brokers = brokers, ["bootstrap.servers"] = brokers }
        end)
    end)
end)

describe("k:produce", function()
    it("returns where the message landed", function()
        local t = topic(2)
        local r1 = assert(k:produce { topic = t, value = "one", partition = 1 })
        assert.are.same({ partition = 1, offset = 0 }, r1)
        local r2 = assert(k:produce { topic = t, value = "two", partition = 1 })
        assert.are.same({ partition = 1, offset = 1 }, r2)
        local r3 = assert(k:produce { topic = t, key = "k", value = "v" })
        assert.truthy(r3.partition == 0 or r3.partition == 1)
    end)

    it("takes keys, null values, headers in both forms and a timestamp", function()
        local t = topic(1)
        assert(k:produce { topic = t, key = "", value = nil })
        assert(k:produce { topic = t, value = "h", headers = { a = "1", b = "2" } })
        local r = assert(k:produce { topic = t, value = "h2", timestamp = 1700000000000,
                                     headers = { { "x", "1" }, { "x", nil }, { "x", "3" } } })
        assert.are.equal(2, r.offset)
    end)

    it("returns nil and librdkafka's error as a string", function()
        local t = topic(2)
        local r, err = k:produce { topic = t, value = "x", partition = 9 }
        assert.is_nil(r)
        assert.are.equal("kafka _UNKNOWN_PARTITION: Local: Unknown partition", err)
    end)

    it("gives up after message.timeout.ms while the leader is down", function()
        local t = topic(1)
        cluster(("leader %s 0 3"):format(t))
        local quick = mf.kafka { brokers = brokers, ["message.timeout.ms"] = 500 }
        -- A new handle may hold its first message to a new topic up to a
        -- second (its next topic scan): on a loaded machine past 500 ms.
        local warm, werr
        for _ = 1, 5 do
            warm, werr = quick:produce { topic = t, value = "warm" }
            if warm then break end
        end
        assert(warm, werr)
        cluster("down 3")
        local r, err = quick:produce { topic = t, value = "late" }
        cluster("up 3")
        assert.is_nil(r)
        assert.are.equal("kafka _MSG_TIMED_OUT: Local: Message timed out", err)
    end)

    it("raises on misuse, naming the key", function()
        local function raises(msg, what)
            local ok, err = pcall(k.produce, k, msg)
            assert.is_false(ok)
            assert.truthy(err:find(what, 1, true), err)
        end
        raises({ value = "x" }, "topic")
        raises({ topic = "t", bogus = 1 }, "'bogus'")
        raises({ topic = "t", value = 42 }, "value")
        raises({ topic = "t", key = {} }, "key")
        raises({ topic = "t", partition = -2 }, "partition")
        raises({ topic = "t", partition = 1.5 }, "partition")
        raises({ topic = "t", timestamp = "now" }, "timestamp")
        raises({ topic = "t", headers = "a=1" }, "headers")
        raises({ topic = "t", headers = { { 1, "x" } } }, "headers[1]")
        raises({ topic = "t", headers = { [2] = { "x", "1" } } }, "headers must")
        raises({ topic = "t", headers = { a = "1", [true] = "x" } }, "headers must")
        raises({ topic = "t", headers = { a = 1 } }, "headers")
        raises("t", "a table")
        assert.has_error(function() k.produce(42, { topic = "t" }) end)
    end)

    it("waits inside a plain coroutine too", function()
        local t = topic(1)
        local r = coroutine.wrap(function()
            return k:produce { topic = t, value = "x" }
        end)()
        assert.equals(0, r.partition)
        assert.equals(0, r.offset)
    end)
end)

describe("k:produce_batch", function()
    it("returns each message's partition and offset, in order", function()
        local t = topic(2)
        local msgs = {}
        for i = 1, 300 do
            msgs[i] = { topic = t, value = "v" .. i, partition = i % 2 }
        end
        msgs[301] = { topic = t, key = "k", value = "h",
                      headers = { { "x", "1" }, { "x", nil } }, partition = 0 }
        msgs[302] = { topic = t, value = "m", headers = { a = "1" }, partition = 1 }
        local rs = assert(k:produce_batch(msgs))
        assert.are.equal(302, rs.delivered)
        assert.are.equal(0, rs.failed)
        assert.are.same({}, rs.errors)
        assert.are.equal(302, #rs.partitions)
        assert.are.equal(302, #rs.offsets)
        local next_offset = { [0] = 0, [1] = 0 }
        for i = 1, 302 do
            local p = rs.partitions[i]
            assert.are.equal(msgs[i].partition, p)
            assert.are.equal(next_offset[p], rs.offsets[i])
            next_offset[p] = rs.offsets[i] + 1
        end
        assert.are.same({ delivered = 1, failed = 0, errors = {},
                          partitions = { 0 }, offsets = { 0 } },
                        assert(k:produce_batch { { topic = topic(1), value = "x" } }))
    end)

    it("takes strings as values for opts.topic, and tables without a topic", function()
        local t = topic(1)
        local rs = assert(k:produce_batch({ "a", "b", { value = "c", key = "k" },
                                           { topic = t, value = "d" } },
                                         { topic = t }))
        assert.are.same({ 0, 1, 2, 3 }, rs.offsets)
        assert.are.equal(4, rs.delivered)
        local c = k:consumer { group = "pb-" .. t, topics = { t },
                               ["session.timeout.ms"] = 3000 }
        local got = {}
        for msg in c:messages(10000) do
            got[#got + 1] = (msg.key or "") .. msg.value
            if #got == 4 then break end
        end
        c:close()
        assert.are.same({ "a", "b", "kc", "d" }, got)
    end)

    it("gives a failed message its error and delivers the others", function()
        local t = topic(2)
        local rs = assert(k:produce_batch {
            { topic = t, value = "a", partition = 0 },
            { topic = t, value = "b", partition = 9 },
            { topic = t, value = "c", partition = 1 },
        })
        assert.are.equal(2, rs.delivered)
        assert.are.equal(1, rs.failed)
        assert.are.same({ [2] = "kafka _UNKNOWN_PARTITION: Local: Unknown partition" },
                        rs.errors)
        assert.are.same({ 0, 9, 1 }, rs.partitions)
        assert.are.same({ 0, -1, 0 }, rs.offsets)
    end)

    it("returns an empty outcome for no messages", function()
        assert.are.same({ delivered = 0, failed = 0, errors = {},
                          partitions = {}, offsets = {} },
                        k:produce_batch {})
    end)

    it("raises on misuse, naming the key", function()
        local function raises(msgs, what, opts)
            local ok, err = pcall(k.produce_batch, k, msgs, opts)
            assert.is_false(ok)
            assert.truthy(err:find(what, 1, true), err)
        end
        raises({ { topic = "t" }, { topic = "t", bogus = 1 } }, "'bogus'")
        raises({ { topic = "t" }, "v" }, "opts.topic")
        raises({ { topic = "t" }, 5 }, "a table or a string")
        raises({ { value = "x" } }, "topic")
        raises({ "v" }, "unknown option 'bogus'", { topic = "t", bogus = 1 })
        raises({ "v" }, "topic must be a string", { topic = 1 })
        raises("t", "table")
        local big = {}
        for i = 1, 100001 do big[i] = false end
        raises(big, "at most 100000 messages")
    end)

    it("waits inside a plain coroutine too", function()
        local t = topic(1)
        local r = coroutine.wrap(function()
            return k:produce_batch({ "x", "y" }, { topic = t })
        end)()
        assert.equals(2, r.delivered)
    end)
end)

describe("mf.task.kafka_produce", function()
    it("is a step of mf.series and mf.parallel", function()
        local t = topic(1)
        local r = mf.series {
            mf.task.kafka_produce(k, { topic = t, value = "a" }),
            mf.parallel {
                mf.task.kafka_produce(k, { topic = t, value = "b" }),
                mf.task.kafka_produce(k, { topic = t, value = "c" }),
            },
        }:wait()
        assert.are.equal("success", r[1].state)
        assert.are.equal(0, r[1].partition)
        assert.are.equal(0, r[1].offset)
        local offsets = { r[2][1].offset, r[2][2].offset }
        table.sort(offsets)
        assert.are.same({ 1, 2 }, offsets)
    end)

    it("waits alone and fails with k:produce's error string", function()
        local t = topic(1)
        local r = mf.task.kafka_produce(k, { topic = t, value = "x", partition = 4 }):wait()
        assert.are.equal("task error", r.state)
        assert.are.equal("kafka _UNKNOWN_PARTITION: Local: Unknown partition", r.error)
        r = mf.task.kafka_produce(k, { topic = t, value = "y" }, { timeout = 10000 }):wait()
        assert.are.equal("success", r.state)
        assert.are.equal(0, r.offset)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.task.kafka_produce({}, { topic = "t" }) end)
        assert.has_error(function() mf.task.kafka_produce(k, "t") end)
        assert.has_error(function()
            mf.task.kafka_produce(k, { topic = "t", nope = 1 }):wait()
        end)
    end)
end)

describe("k:metadata", function()
    it("lists the brokers and the topics with sorted partitions and leaders", function()
        local t = topic(3)
        cluster(("leader %s 0 2"):format(t))
        local md = assert(k:metadata())
        assert.are.equal(3, #md.brokers)
        for _, b in ipairs(md.brokers) do
            assert.are.equal("127.0.0.1", b.host)
            assert.truthy(b.id >= 1 and b.id <= 3 and b.port > 0)
        end
        assert.are.equal("number", type(md.controller))
        local info = md.topics[t]
        assert.are.equal(t, info.name)
        assert.is_nil(info.error)
        assert.are.equal(3, #info.partitions)
        for i, p in ipairs(info.partitions) do
            assert.are.equal(i - 1, p.id)
            assert.are.equal(3, #p.replicas)
            assert.truthy(#p.isrs >= 1)
        end
        assert.are.equal(2, info.partitions[1].leader)
        cluster(("leader %s 0 1"):format(t))
        md = assert(k:metadata(t, 5000))
        assert.are.equal(1, md.topics[t].partitions[1].leader)
        local n = 0
        for _ in pairs(md.topics) do n = n + 1 end
        assert.are.equal(1, n)
    end)

    it("raises on misuse", function()
        assert.has_error(function() k:metadata({}) end)
        assert.has_error(function() k:metadata("t", "soon") end)
    end)
end)

describe("k:create_topic", function()
    -- librdkafka 2.0.2's mock cluster has no CreateTopics and names no
    -- controller: the request fails after its timeout (without one,
    -- librdkafka's socket.timeout.ms: 60 s), with librdkafka's words.
    it("returns nil and the error when the cluster cannot create it in time", function()
        local start = mf.now()
        local ok, err = k:create_topic("spec-created", 3, nil, 1000)
        local took = mf.now() - start
        assert.is_nil(ok)
        assert.are.equal("kafka _TIMED_OUT: Failed while waiting for controller: Local: Timed out", err)
        assert.is_true(took >= 900 and took < 5000, took)
    end)

    -- spec/fixture/kafka_controller.py answers CreateTopics as a one-broker
    -- cluster (no idempotence there: it has no InitProducerId).
    it("returns true once created, and the broker's refusal after", function()
        local ctl = mf.kafka { brokers = assert(os.getenv("MF_KAFKA_CONTROLLER")),
                               ["enable.idempotence"] = false }
        assert.is_true(ctl:create_topic("spec-made", 4))
        local md = ctl:metadata("spec-made")
        assert.are.equal(4, #md.topics["spec-made"].partitions)
        assert.are.equal(1, md.controller)
        local ok, err = ctl:create_topic("spec-made", 4)
        assert.is_nil(ok)
        assert.are.equal("kafka TOPIC_ALREADY_EXISTS: Topic 'spec-made' already exists.", err)
        ok, err = ctl:create_topic("spec-wide", 1, 3)
        assert.is_nil(ok)
        assert.are.equal("kafka INVALID_REPLICATION_FACTOR: Replication factor: 3 "
                         .. "larger than available brokers: 1.", err)
    end)

    it("raises on misuse", function()
        assert.has_error(function() k:create_topic("t", 0) end)
        assert.has_error(function() k:create_topic("t", 3, 0) end)
        assert.has_error(function() k:create_topic(nil, 3) end)
        assert.has_error(function() k:create_topic("t", 3, nil, -1) end)
        assert.has_error(function() k:create_topic("t", 3, nil, "soon") end)
    end)
end)

describe("k:consumer", function()
    it("opens a consumer on k's brokers that reads what k:produce wrote", function()
        local t = topic(1)
        assert(k:produce { topic = t, key = "", value = nil })
        assert(k:produce { topic = t, value = "v", headers = { { "x", "1" }, { "x", nil } } })
        local c = k:consumer { group = "kp-" .. t, topics = { t },
                               ["session.timeout.ms"] = 3000 }
        assert.are.equal("moonflow.kafka.consumer", getmetatable(c))
        local got = {}
        for m in c:messages(10000) do
            got[#got + 1] = m
            if #got == 2 then break end
        end
        c:close()
        assert.are.equal(2, #got)
        assert.are.equal("", got[1].key)
        assert.is_nil(got[1].value)
        assert.is_nil(got[2].key)
        assert.are.equal("v", got[2].value)
        assert.are.same({ { "x", "1" }, { "x", nil } }, got[2].headers)
    end)

    it("delivers every header of a table that mixes both forms", function()
        local t = topic(1)
        assert(k:produce { topic = t, value = "m",
                           headers = { source = "web", { "x", "1" },
                                       { "x", nil }, lang = "lua" } })
        local c = k:consumer { group = "kh-" .. t, topics = { t },
                               ["session.timeout.ms"] = 3000 }
        local got
        for m in c:messages(10000) do
            got = m
            break
        end
        c:close()
        -- The pairs first, in order, then the named ones (in any order).
        assert.are.same({ { "x", "1" }, { "x", nil } },
                        { got.headers[1], got.headers[2] })
        assert.are.equal(4, #got.headers)
        local named = {}
        for i = 3, 4 do named[got.headers[i][1]] = got.headers[i][2] end
        assert.are.same({ source = "web", lang = "lua" }, named)
    end)

    it("raises naming a missing group", function()
        local ok, err = pcall(k.consumer, k, { topics = { "t" } })
        assert.is_false(ok)
        assert.truthy(err:find("group", 1, true), err)
    end)
end)
