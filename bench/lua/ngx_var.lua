-- The cost of one ngx.var read in a `moonflow serve` handler (no
-- ngx.handler wrapper; run it with jit = false for the numbers of
-- bench/README.md, taken with the JIT off): GET /ngx_var?a=1
-- with a Host header answers, per variable, the CPU nanoseconds of one
-- read (os.clock over N reads, N = ?n=, default 50,000), and the cost of
-- the loop alone, already taken out. bench/README.md, "ngx.var".
local ngx = require "moonflow.ngx"

local NAMES = { "uri", "request_uri", "args", "arg_a", "http_host", "remote_addr",
                "request_method", "cookie_c" }

local function per_read(n, name)
    local var = ngx.var
    local t0 = os.clock()
    for _ = 1, n do local _ = var[name] end
    return os.clock() - t0
end

local function empty_loop(n)
    local t = {}
    local t0 = os.clock()
    for _ = 1, n do local _ = t.x end
    return os.clock() - t0
end

return function(req, resp)
    local n = tonumber(req.query.n) or 50000
    local base = empty_loop(n)
    local out, total = {}, 0
    for _, name in ipairs(NAMES) do
        local ns = (per_read(n, name) - base) / n * 1e9
        out[name] = math.floor(ns + 0.5)
        total = total + ns
    end
    out.mean = math.floor(total / #NAMES + 0.5)
    resp:json(out)
end
