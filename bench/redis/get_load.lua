-- bench/redis/get_load.lua — GET load on one Redis key from `moonflow run`.
--
--   moonflow run bench/redis/get_load.lua URL OPS CONC [PIPELINE] [MAX_S] [KEY] [VALUE]
--
-- CONC coroutines share the script's client (mf.redis(URL)) and loop until
-- OPS GETs were issued or MAX_S seconds passed (default 30), whichever
-- comes first. PIPELINE 1 (default): one r:call("GET", KEY) per call;
-- PIPELINE P > 1: r:pipeline{} of P GETs per call. Every reply must be VALUE
-- (when given) or at least a string; anything else counts as wrong.
--
-- Prints one line for the harness (bench/redis/compare_redis.py):
--   bench-summary ops=N seconds=S cpu_s=S errors=N wrong=N timed_out=0|1
-- seconds: wall time from the first call to the last reply (monotonic
-- clock); cpu_s: the process's utime + stime over the same window
-- (getrusage). Exits 1 if any call failed or any reply was wrong.
local mf = require "moonflow"

-- The clocks (bench/lua/_clock.lua), found from this script's folder.
package.path = arg[0]:gsub("[^/]*$", "") .. "../lua/?.lua;" .. package.path
local clock = require "_clock"
local wall, cpu = clock.wall, clock.cpu

local url = assert(arg[1], "usage: get_load.lua URL OPS CONC [PIPELINE] [MAX_S] [KEY] [VALUE]")
local ops = assert(tonumber(arg[2]), "OPS: a number")
local conc = assert(tonumber(arg[3]), "CONC: a number")
local pipeline = tonumber(arg[4] or 1)
local max_s = tonumber(arg[5] or 30)
local key = arg[6] or "key:__rand_int__"
local want = arg[7]

local r = mf.redis(url)
local cmds = {}
for i = 1, pipeline do cmds[i] = { "GET", key } end

local issued, done, errors, wrong, finished = 0, 0, 0, 0, 0
local first_error, t1, cpu1
local deadline_ms -- mf.now() is the loop's cached clock: cheap, ms

local function good(v)
    if want then return v == want end
    return type(v) == "string"
end

local function worker()
    while issued < ops and mf.now() < deadline_ms do
        if pipeline == 1 then
            issued = issued + 1
            local v, err = r:call("GET", key)
            if v == nil and err then
                errors = errors + 1
                first_error = first_error or err
            elseif not good(v) then
                wrong = wrong + 1
            end
            done = done + 1
        else
            issued = issued + pipeline
            local res, err = r:pipeline(cmds)
            if not res then
                errors = errors + pipeline
                first_error = first_error or err
            else
                for i = 1, pipeline do
                    if not good(res[i]) then wrong = wrong + 1 end
                end
            end
            done = done + pipeline
        end
    end
    finished = finished + 1
    if finished == conc then t1, cpu1 = wall(), cpu() end -- the last reply
end

-- One GET before the clock starts: the connection is opened outside the
-- measured window (as redis-benchmark connects its clients before its own).
local v, err = r:call("GET", key)
if not good(v) then
    io.stderr:write("get_load.lua: first GET: ", tostring(v), " ", tostring(err), "\n")
    os.exit(1)
end

local cpu0, t0 = cpu(), wall()
deadline_ms = mf.now() + max_s * 1000
for _ = 1, conc do mf.timer.at(0, worker) end
while finished < conc do mf.sleep(20) end

io.write(("bench-summary ops=%d seconds=%.6f cpu_s=%.6f errors=%d wrong=%d timed_out=%d\n")
    :format(done, t1 - t0, cpu1 - cpu0, errors, wrong, done < ops and 1 or 0))
if errors > 0 or wrong > 0 then
    io.stderr:write("get_load.lua: ", errors, " errors (first: ", tostring(first_error),
        "), ", wrong, " wrong replies\n")
    os.exit(1)
end
