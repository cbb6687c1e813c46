-- /phase_lock?key=K&wait=sleep|http|redis|mysql|socket&ms=N: takes the
-- lock K (a shared dict) in access, waits N ms in content, and gives the
-- lock back in its log phase (phases_spec.lua), which runs even when the
-- client left mid-wait. It records what its answer returned (the client
-- gone: nil, "closed") and that its log ran.
local mf = require "moonflow"

local locks = mf.shared_dict("phase_locks", 1048576)

local waits = {
    sleep = function(_, ms) mf.sleep(ms) end,
    http = function(req, ms)
        assert(mf.http.get("http://" .. req.headers.host .. "/slow?ms=" .. ms))
    end,
    redis = function(_, ms)
        local r = mf.redis(os.getenv("MF_REDIS_URL"))
        r:call("BLPOP", "phase_lock:nothing", ms / 1000)
    end,
    mysql = function(_, ms)
        local db = mf.mysql(os.getenv("MF_MYSQL_URL"))
        assert(db:query(("SELECT SLEEP(%.3f)"):format(ms / 1000)))
    end,
    socket = function(req, ms)
        local host, port = req.headers.host:match("^(.-):(%d+)$")
        local sock = mf.socket.tcp()
        assert(sock:connect(host, tonumber(port)))
        assert(sock:send("GET /slow?ms=" .. ms .. " HTTP/1.0\r\n\r\n"))
        assert(sock:receive("*a"))
        sock:close()
    end,
}

return {
    access = function(req, resp)
        if not locks:add(req.query.key, req.id, 30) then
            resp.status = 409
            return resp:send("locked")
        end
        req.ctx.locked = true
    end,
    content = function(req, resp)
        waits[req.query.wait](req, tonumber(req.query.ms) or 300)
        local ok, err = resp:send("done")
        locks:set("answer:" .. req.query.key, tostring(ok) .. " " .. tostring(err))
    end,
    log = function(req, resp)
        if not req.ctx.locked then return end -- a 409: not its lock
        locks:delete(req.query.key)
        locks:set("log:" .. req.query.key, resp.status)
    end,
}
