-- The Lua hello with the server's metrics on, for what they cost a
-- request (http/instructions.py --server lua --config
-- bench/lua/_metrics_conf.lua, against no --config): every request counted
-- by route, method and status, timed into a histogram, its bytes added up.
return {
    root = ".", access_log = "off",
    metrics = { path = "/metrics" },
}
