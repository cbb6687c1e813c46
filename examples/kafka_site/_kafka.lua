-- The site's producer and counters (a module: files starting with '_' are
-- no routes). KAFKA_BROKERS names the cluster, KAFKA_TOPIC the topic
-- (default "events"). mf.kafka returns the process's one producer for these
-- properties, so every worker shares it; each worker keeps the object and
-- its own counters.
local mf = require "moonflow"

local M = {
    topic = os.getenv("KAFKA_TOPIC") or "events",
    -- This worker's counts: requests that reached /event, events delivered
    -- (answered 200), events that failed (answered 503).
    counts = { requests = 0, delivered = 0, failed = 0 },
}

local producer

function M.producer()
    producer = producer or mf.kafka {
        brokers = os.getenv("KAFKA_BROKERS") or "127.0.0.1:9092",
        -- A handler never waits longer than this for its delivery report.
        ["message.timeout.ms"] = 10000,
        -- librdkafka waits 5 ms for a batch to fill. Every handler here
        -- waits for its report, so that wait is added to every answer, and
        -- the batches are made by the handlers waiting together, not by
        -- the wait: 1 ms (at 64 connections: about 3.5x the requests/s at
        -- 0.7x the CPU per request; 0 ms makes each message a request of
        -- its own).
        ["linger.ms"] = 1,
    }
    return producer
end

-- Request ids: a random prefix per worker (16 hex digits from
-- /dev/urandom), then a counter.
local prefix
local serial = 0

function M.request_id()
    if not prefix then
        local f = assert(io.open("/dev/urandom", "rb"))
        prefix = f:read(8):gsub(".", function(c) return ("%02x"):format(c:byte()) end)
        f:close()
    end
    serial = serial + 1
    return ("%s-%d"):format(prefix, serial)
end

return M
