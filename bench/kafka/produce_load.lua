-- bench/kafka/produce_load.lua — produce load from `moonflow run`, the
-- peer of bench_kafka_plain (bench/kafka/plain_producer.c) and `kcat -P`
-- on the same mock cluster.
--
--   moonflow run bench/kafka/produce_load.lua BROKERS TOPIC MESSAGES [VALUE_BYTES [CONC [MAX_S [BATCH]]]]
--
-- CONC messages (default 20000) are in flight on one mf.kafka producer
-- (acks=all, idempotence: moonflow's defaults, as the peers are
-- configured), as CONC / BATCH coroutines. Each loops
-- k:produce_batch(values, {topic = TOPIC}) with BATCH (default 1000)
-- values — VALUE_BYTES (default 100) bytes of "0123456789abcdef" repeated,
-- no key: the partitioner spreads them — and checks the batch's outcome
-- (every message's), until MESSAGES were produced or MAX_S seconds
-- (default 60) passed. BATCH 1 uses k:produce, one message per call.
-- CONC messages in flight keep librdkafka's batches full, as the plain
-- producer's unbounded queue does (fewer leave it waiting on the brokers:
-- 2000 take twice as long); ten batches in flight rather than one keep
-- the brokers busy while a batch's outcomes are read.
--
-- The first message is produced alone, before the others (see below).
--
-- Prints one line for bench/kafka/compare_kafka.py:
--   bench-summary messages=N seconds=S cpu_s=S errors=N timed_out=0|1
-- seconds: the first produce to the last delivery report (monotonic
-- clock); cpu_s: the process's utime + stime over that window (every
-- thread: librdkafka's too). Exits 1 if any message failed.
local mf = require "moonflow"

-- The clocks (bench/lua/_clock.lua), found from this script's folder.
package.path = arg[0]:gsub("[^/]*$", "") .. "../lua/?.lua;" .. package.path
local clock = require "_clock"
local wall, cpu = clock.wall, clock.cpu

local usage = "usage: produce_load.lua BROKERS TOPIC MESSAGES [VALUE_BYTES [CONC [MAX_S [BATCH]]]]"
local brokers = assert(arg[1], usage)
local topic = assert(arg[2], usage)
local messages = assert(tonumber(arg[3]), usage)
local value_bytes = tonumber(arg[4] or 100)
local conc = math.min(tonumber(arg[5] or 20000), messages)
local max_s = tonumber(arg[6] or 60)
local batch = math.max(1, math.min(tonumber(arg[7] or 1000), conc))
local workers = math.ceil(conc / batch)

local k = mf.kafka { brokers = brokers, acks = "all" }
local value = ("0123456789abcdef"):rep(math.ceil(value_bytes / 16)):sub(1, value_bytes)
local msg = { topic = topic, value = value }
local opts = { topic = topic }

local issued, errors, finished = 0, 0, 0
local first_error, t1, cpu1
local deadline_ms

local function count(r, err)
    if not r then
        errors = errors + 1
        first_error = first_error or err
    end
end

-- One call of BATCH messages (fewer at the end); every outcome counts.
local function produce_batch(msgs)
    local n = math.min(batch, messages - issued)
    for i = n + 1, #msgs do msgs[i] = nil end
    for i = #msgs + 1, n do msgs[i] = value end
    issued = issued + n
    local rs, err = k:produce_batch(msgs, opts)
    if not rs then
        for _ = 1, n do count(nil, err) end
        return
    end
    if rs.delivered ~= n then -- rs.errors: {[i] = err} of the failed ones
        errors = errors + (n - rs.delivered)
        first_error = first_error or select(2, next(rs.errors)) or "no outcome"
    end
end

local function worker()
    local msgs = {}
    while issued < messages and mf.now() < deadline_ms do
        if batch == 1 then
            issued = issued + 1
            count(k:produce(msg))
        else
            produce_batch(msgs)
        end
    end
    finished = finished + 1
    if finished == workers then -- the last report
        t1, cpu1 = wall(), cpu()
    end
end

-- The first message goes alone and is waited for: librdkafka 2.0.2 holds
-- messages to a topic whose metadata it has not fetched yet for up to a
-- second (its next topic scan) when they come a millisecond or more after
-- the handle opened, as they do here; the plain producer and kcat send
-- their first message within that millisecond. It counts in MESSAGES.
local t0, cpu0 = wall(), cpu()
issued = 1
count(k:produce(msg))
deadline_ms = mf.now() + max_s * 1000
for _ = 1, workers do mf.timer.at(0, worker) end
local give_up = mf.now() + (max_s + 30) * 1000
while finished < workers and mf.now() < give_up do mf.sleep(10) end
if finished < workers then
    io.stderr:write("produce_load.lua: the workers did not finish\n")
    os.exit(1)
end

io.write(("bench-summary messages=%d seconds=%.6f cpu_s=%.6f errors=%d timed_out=%d\n")
    :format(issued - errors, t1 - t0, cpu1 - cpu0, errors, issued < messages and 1 or 0))
if errors > 0 then
    io.stderr:write("produce_load.lua: ", errors, " errors (first: ", tostring(first_error), ")\n")
    os.exit(1)
end
