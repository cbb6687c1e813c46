-- /mysql_tx?op=insert|raise|hang|spin|count&id=N: transactions on
-- serve_t in a handler (mysql_spec.lua). The client has one connection, so
-- a pinned connection that never came back makes the next request wait
-- and fail. The route stops its handler when the client leaves (on_abort
-- = "stop"): mysql_spec.lua checks that the transaction is rolled back and
-- the connection given back then.
local mf = require "moonflow"

local function insert(tx, id)
    return assert(tx:query(("INSERT INTO serve_t (id) VALUES (%d)"):format(id)))
end

local ops = {
    insert = function(tx, id) return insert(tx, id) end,
    raise = function(tx, id)
        insert(tx, id)
        error("the handler failed inside its transaction")
    end,
    hang = function(tx, id)
        insert(tx, id)
        return tx:query("SELECT SLEEP(10)")
    end,
    spin = function(tx, id)
        insert(tx, id)
        local n = 0
        while true do n = n + 1 end
    end,
}

local function content(req, resp)
    local db = mf.mysql(os.getenv("MF_MYSQL_URL"), { pool = 1, queue_timeout = 3000 })
    local id = assert(tonumber(req.query.id))
    if req.query.op == "count" then
        local res = assert(db:query(
            ("SELECT COUNT(*) AS n FROM serve_t WHERE id = %d"):format(id)))
        return resp:send(tostring(res[1].n))
    end
    assert(db:transaction(ops[req.query.op], id))
    resp:send("committed")
end

return { content = content, on_abort = "stop" }
