-- The shared part of TechEmpower's database handlers (te_db.lua,
-- te_queries.lua, te_updates.lua; bench/mysql/techempower.py): the client,
-- the statements, the `queries` parameter and the parallel reads.
-- MF_BENCH_MYSQL is the mysql:// URL, MF_BENCH_MYSQL_POOL the pool size
-- (the blocking peer's thread count), MF_BENCH_MYSQL_PIPELINE the client's
-- pipeline option (default 1: off).
local mf = require "moonflow"

local M = {}

local url = os.getenv("MF_BENCH_MYSQL") or "mysql://bench:bench@127.0.0.1:3306/sbtest"
-- A request queues up to 20 statements: 256 connections need 5,120 places.
local opts = { pool = tonumber(os.getenv("MF_BENCH_MYSQL_POOL")) or 16, queue = 16384,
    pipeline = tonumber(os.getenv("MF_BENCH_MYSQL_PIPELINE")) or 1 }
local select_sql = "SELECT id, randomNumber FROM world WHERE id = ?"
local update_sql = "UPDATE world SET randomNumber = ? WHERE id = ?"
local random = math.random
M.ROWS = 10000

function M.db()
    return mf.mysql(url, opts)
end

function M.random_id()
    return random(1, M.ROWS)
end

-- TechEmpower's rule: an integer clamped to 1..500, 1 when absent or not a
-- number.
function M.queries(req)
    local q = tonumber(req.query.queries) or 1
    q = math.floor(q)
    if q < 1 then return 1 end
    if q > 500 then return 500 end
    return q
end

-- Answers 500 with a log line; returns nil so a handler can `return` it.
function M.fail(resp, what)
    io.stderr:write("te: ", tostring(what), "\n")
    resp.status = 500
    return resp:send("query failed\n")
end

-- q random rows, read side by side (one mf.parallel: one yield for all);
-- an array of {id=, randomNumber=}, or nil and the first error.
function M.read_rows(db, q)
    local tasks = {}
    for i = 1, q do tasks[i] = mf.task.mysql(db, select_sql, M.random_id()) end
    local results = mf.parallel(tasks):wait()
    local rows = {}
    for i = 1, q do
        local r = results[i]
        if r.state ~= "success" or not r[1] then
            return nil, r.error or "no such row"
        end
        rows[i] = r[1]
    end
    return rows
end

-- Gives every row a new random number and writes them side by side (each
-- its own prepared UPDATE); nil and the first error on a failure.
function M.update_rows(db, rows)
    local tasks = {}
    for i, row in ipairs(rows) do
        row.randomNumber = M.random_id()
        tasks[i] = mf.task.mysql(db, update_sql, row.randomNumber, row.id)
    end
    for _, r in ipairs(mf.parallel(tasks):wait()) do
        if r.state ~= "success" then return nil, r.error end
    end
    return rows
end

function M.read_one(db)
    local res, err = db:query(select_sql, M.random_id())
    if not res then return nil, err end
    return res[1] or nil, "no such row"
end

return M
