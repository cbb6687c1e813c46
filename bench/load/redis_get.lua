-- bench/load/redis_get.lua — a `moonflow bench` scenario: GETs of one key.
--
--   moonflow bench -t 1 -c CONC -d 5s bench/load/redis_get.lua -- URL [P] [KEY] [CONNS]
--
-- Each iteration is one Redis task: GET KEY (P 1), or a list of P GETs sent
-- together on the client's connection (P > 1, Redis pipelining). The flow
-- is built once in init() and returned by every iteration: the same
-- description runs again each time. The users share the thread's client:
-- CONNS pipelined connections (default 1: the GETs of one loop iteration
-- go out in one write; CONC: about one connection per user).
local mf = require "moonflow"

local flow

function init(args)
    local url = assert(args[1], "usage: redis_get.lua -- URL [PIPELINE] [KEY] [CONNS]")
    local pipeline = tonumber(args[2] or 1)
    local key = args[3] or "key:__rand_int__"
    local r = mf.redis(url, { pipeline_connections = tonumber(args[4] or 1) })
    if pipeline == 1 then
        flow = mf.task.redis(r, "GET", key)
    else
        local cmds = {}
        for i = 1, pipeline do cmds[i] = { "GET", key } end
        flow = mf.task.redis(r, cmds)
    end
end

function iteration()
    return flow
end
