-- The site's database (a module: files starting with '_' are no routes).
-- MYSQL_URL names the server; every route calls db() per request, which
-- returns the worker's cached client (mf.mysql caches by URL and options).
local mf = require "moonflow"

local url = os.getenv("MYSQL_URL") or "mysql://root@127.0.0.1:3306/notes"
local opts = { pool = 8, timeout = 5000, connect_timeout = 2000, queue_timeout = 2000 }

local M = {}

function M.db()
    return mf.mysql(url, opts)
end

-- Answers an error as JSON: {"error": message}.
function M.fail(resp, status, message)
    resp:json({ error = message }, status)
end

-- A database failure: 500 for the client, the cause on the error log.
function M.failed(req, resp, err)
    io.stderr:write("mysql_site: ", req.method, " ", req.path, ": ", tostring(err), "\n")
    M.fail(resp, 500, "database unavailable")
end

-- A positive integer from a query or JSON value (a string or a number),
-- or nil.
function M.positive_int(v)
    local n = (type(v) == "string" or type(v) == "number") and tonumber(v)
    if n and n >= 1 and n <= 2 ^ 53 and n == math.floor(n) then return n end
end

return M
