-- bench/mysql/point_load.lua — point-select load from `moonflow run`, the
-- peer of `sysbench oltp_point_select` on the same server and table.
--
--   moonflow run bench/mysql/point_load.lua URL QUERIES CONC TABLE_SIZE [MAX_S [PIPELINE]]
--
-- CONC coroutines share one mf.mysql(URL, {pool = CONC}) client: as many
-- connections as sysbench --threads=CONC opens. PIPELINE (default 1: off)
-- is the client's pipeline option: up to PIPELINE statements in flight on
-- one connection, so fewer connections carry the CONC callers. Each loops
-- db:query("SELECT c FROM sbtest1 WHERE id=?", id) — sysbench's statement,
-- a server-side prepared statement — with id uniform in 1..TABLE_SIZE, until
-- QUERIES were issued or MAX_S seconds passed (default 30). Every answer
-- must be one row whose c is a 119-byte string (sysbench's c column).
--
-- Before the clock starts, CONC queries run at once: the pool opens its
-- CONC connections and prepares the statement on each (sysbench connects
-- and prepares in its threads' init, before its clock too).
--
-- Prints one line for bench/mysql/compare_mysql.py:
--   bench-summary queries=N seconds=S cpu_s=S wait_s=S errors=N wrong=N timed_out=0|1
-- seconds: wall time from the first timed query to the last answer
-- (monotonic clock); cpu_s: the process's utime + stime over that window;
-- wait_s: the time the loop's thread spent runnable but not running (on
-- the run queue, /proc/thread-self/schedstat) over that window: on a
-- shared machine, the share of the window other processes took from it.
-- Exits 1 if any query failed or any answer was wrong.
local mf = require "moonflow"

-- The clocks (bench/lua/_clock.lua), found from this script's folder.
package.path = arg[0]:gsub("[^/]*$", "") .. "../lua/?.lua;" .. package.path
local clock = require "_clock"
local wall, cpu = clock.wall, clock.cpu

local usage = "usage: point_load.lua URL QUERIES CONC TABLE_SIZE [MAX_S [PIPELINE]]"
local url = assert(arg[1], usage)
local queries = assert(tonumber(arg[2]), usage)
local conc = assert(tonumber(arg[3]), usage)
local table_size = assert(tonumber(arg[4]), usage)
local max_s = tonumber(arg[5] or 30)
local pipeline = tonumber(arg[6] or 1)

local db = mf.mysql(url, { pool = conc, queue = conc, pipeline = pipeline })
local sql = "SELECT c FROM sbtest1 WHERE id=?"
local random = math.random

-- Seconds this thread waited on a run queue (schedstat's 2nd field, ns).
local function run_queue_wait()
    local f = io.open("/proc/thread-self/schedstat")
    if not f then return 0 end
    local waited = f:read("*l"):match("^%d+ (%d+)")
    f:close()
    return tonumber(waited) * 1e-9
end

local issued, errors, wrong, finished = 0, 0, 0, 0
local first_error, t1, cpu1, wait1
local deadline_ms -- mf.now(): the loop's cached clock, ms

local function one()
    local res, err = db:query(sql, random(1, table_size))
    if not res then
        errors = errors + 1
        first_error = first_error or err
    elseif #res ~= 1 or type(res[1].c) ~= "string" or #res[1].c ~= 119 then
        wrong = wrong + 1
    end
end

local function worker()
    while issued < queries and mf.now() < deadline_ms do
        issued = issued + 1
        one()
    end
    finished = finished + 1
    if finished == conc then -- the last answer
        t1, cpu1, wait1 = wall(), cpu(), run_queue_wait()
    end
end

local function all_at_once(fn)
    finished = 0
    for _ = 1, conc do mf.timer.at(0, fn) end
    local give_up = mf.now() + (max_s + 10) * 1000
    while finished < conc and mf.now() < give_up do mf.sleep(10) end
    return finished == conc
end

-- Warm-up: every pool connection opened and its statement prepared.
deadline_ms = mf.now() + (max_s + 10) * 1000
local warm = all_at_once(function() one(); finished = finished + 1 end)
if not warm or errors > 0 or wrong > 0 then
    io.stderr:write("point_load.lua: warm-up failed: ", tostring(first_error or "wrong answers"), "\n")
    os.exit(1)
end

local cpu0, t0, wait0 = cpu(), wall(), run_queue_wait()
deadline_ms = mf.now() + max_s * 1000
if not all_at_once(worker) then
    io.stderr:write("point_load.lua: the workers did not finish\n")
    os.exit(1)
end

io.write(("bench-summary queries=%d seconds=%.6f cpu_s=%.6f wait_s=%.6f errors=%d wrong=%d timed_out=%d\n")
    :format(issued, t1 - t0, cpu1 - cpu0, wait1 - wait0, errors, wrong, issued < queries and 1 or 0))
if errors > 0 or wrong > 0 then
    io.stderr:write("point_load.lua: ", errors, " errors (first: ", tostring(first_error),
        "), ", wrong, " wrong answers\n")
    os.exit(1)
end
