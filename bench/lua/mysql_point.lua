-- The MySQL handler of bench/ (GET /mysql_point?id=N): one point select by
-- primary key on sysbench's table, through a server-side prepared
-- statement, the row as JSON. MF_BENCH_MYSQL is the mysql:// URL,
-- MF_BENCH_MYSQL_POOL the pool size (the blocking peer's thread count),
-- MF_BENCH_MYSQL_PIPELINE the client's pipeline option (default 1: off).
-- mf.mysql(url, opts) is looked up per request, as a handler would; the
-- worker's client is cached, so the lookup finds the same one every time.
local mf = require "moonflow"

local url = os.getenv("MF_BENCH_MYSQL") or "mysql://bench:bench@127.0.0.1:3306/sbtest"
local opts = { pool = tonumber(os.getenv("MF_BENCH_MYSQL_POOL")) or 16,
    pipeline = tonumber(os.getenv("MF_BENCH_MYSQL_PIPELINE")) or 1 }
local sql = "SELECT id, k, c, pad FROM sbtest1 WHERE id = ?"

return function(req, resp)
    local id = tonumber(req.query.id)
    if not id then
        resp.status = 400
        return resp:send("bad id\n")
    end
    local res, err = mf.mysql(url, opts):query(sql, id)
    if not res then
        resp.status = 500
        io.stderr:write("mysql_point: ", err, "\n")
        return resp:send("query failed\n")
    end
    if not res[1] then
        resp.status = 404
        return resp:send("no such row\n")
    end
    resp:json(res[1])
end
