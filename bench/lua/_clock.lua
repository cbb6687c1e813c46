-- bench/lua/_clock.lua — the clocks of the load scripts run by `moonflow
-- run` (bench/redis/get_load.lua, bench/mysql/point_load.lua): wall() in
-- seconds on the monotonic clock, cpu() the process's utime + stime in
-- seconds (every thread). A module: '_' keeps it from being a route of the
-- bench/lua site. The scripts find it with
--   package.path = arg[0]:gsub("[^/]*$", "") .. "../lua/?.lua;" .. package.path
local ffi = require "ffi"

ffi.cdef [[
struct mf_bench_timespec { long sec; long nsec; };
struct mf_bench_rusage { long utime_s, utime_us, stime_s, stime_us; long rest[14]; };
int clock_gettime(int clock, struct mf_bench_timespec *ts);
int getrusage(int who, struct mf_bench_rusage *usage);
]]

local ts, ru = ffi.new("struct mf_bench_timespec"), ffi.new("struct mf_bench_rusage")

local M = {}

function M.wall()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.sec) + tonumber(ts.nsec) * 1e-9
end

function M.cpu()
    ffi.C.getrusage(0, ru) -- RUSAGE_SELF: every thread of the process
    return tonumber(ru.utime_s + ru.stime_s) + tonumber(ru.utime_us + ru.stime_us) * 1e-6
end

return M
