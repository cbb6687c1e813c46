-- wrk script of make soak: a fixed mix of paths, and the responses counted
-- by kind (each handler names itself in X-Kind; "-" for none, the 404s)
-- and status. The counts are printed as "kind KIND STATUS N" lines.
local paths = { "/hello", "/fanout", "/hello", "/redis", "/hello",
                "/stream", "/hello", "/missing", "/hello", "/redis" }
local threads = {}
local next_path = 0

function setup(thread)
    table.insert(threads, thread)
end

function init(args)
    counts = {}
end

function request()
    next_path = next_path % #paths + 1
    return wrk.format(nil, paths[next_path])
end

function response(status, headers, body)
    local key = (headers["X-Kind"] or "-") .. " " .. status
    counts[key] = (counts[key] or 0) + 1
end

function done(summary, latency, requests)
    local total = {}
    for _, thread in ipairs(threads) do
        for key, n in pairs(thread:get("counts")) do
            total[key] = (total[key] or 0) + n
        end
    end
    for key, n in pairs(total) do
        io.write(string.format("kind %s %d\n", key, n))
    end
end
