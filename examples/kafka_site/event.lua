-- /event: one Kafka message per request, answered after its delivery
-- report.
--
--   POST /event  (body)     → the body is the message's value
--   GET  /event?QUERY       → the query string (as sent) is the value
--
-- The key is a request id (unique per process: a random per-worker prefix
-- and a counter). 200 {"id": key, "topic": t, "partition": p, "offset": o}
-- once the brokers acknowledged it (acks=all: moonflow's idempotent
-- default); 503 {"error": "kafka NAME: message"} when it could not be
-- delivered (brokers down past message.timeout.ms, ...), and the cause on
-- the error log: "kafka_site: event <id>: <error>".
local site = require "_kafka"

return function(req, resp)
    local method = req.method -- each read is a call into C
    if method ~= "POST" and method ~= "GET" then
        resp.headers["Allow"] = "GET, POST"
        return resp:json({ error = "GET or POST" }, 405)
    end
    local counts = site.counts
    counts.requests = counts.requests + 1
    local id = site.request_id()
    local value = method == "POST" and (req.body or "") or (req.uri:match("%?(.*)$") or "")
    local r, err = site.producer():produce { topic = site.topic, key = id, value = value }
    if not r then
        counts.failed = counts.failed + 1
        io.stderr:write("kafka_site: event ", id, ": ", tostring(err), "\n")
        return resp:json({ error = err }, 503)
    end
    counts.delivered = counts.delivered + 1
    resp:json { id = id, topic = site.topic, partition = r.partition, offset = r.offset }
end
