-- The Lua fan-out of bench/: two GETs to the upstream side by side, then
-- both bodies. MF_BENCH_UPSTREAM is "host:port".
local mf = require "moonflow"

local url = "http://" .. (os.getenv("MF_BENCH_UPSTREAM") or "127.0.0.1:80") .. "/"

return function(req, resp)
    local r = mf.parallel {
        mf.task.http { url = url },
        mf.task.http { url = url },
    }:wait()
    if r[1].status ~= 200 or r[2].status ~= 200 then
        resp.status = 502
        return resp:send("bad gateway\n")
    end
    resp:send(r[1].body .. r[2].body)
end
