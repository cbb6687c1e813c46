-- The Lua hello behind a rate limit, for the limit's cost per request
-- (http/instructions.py --server lua --config bench/lua/_limit_conf.lua
-- --path /limited against --path /): a limit.req every request passes
-- (its rate and burst out of reach), keyed by the client's address.
return {
    root = ".", access_log = "off",
    shared = { limits = 1048576 },
    routes = {
        ["/limited"] = { file = "index.lua", limit = { req = {
            rate = 1000000000, burst = 1000000000, key = "remote_addr",
            dict = "limits" } } },
    },
}
