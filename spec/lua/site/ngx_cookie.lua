-- Debian's lua-nginx-cookie (nginx.cookie) run unchanged on moonflow.ngx
-- (openresty_libs_spec.lua): answers "a=<cookie a>" and sets two cookies
-- through ngx.header, as the library does in OpenResty.
local ngx = require "moonflow.ngx"
local ck = require "nginx.cookie"

local function count(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n
end

return ngx.handler(function(req, resp)
    local cookie = assert(ck:new())
    local a = cookie:get("a")
    assert(cookie:set { key = "seen", value = "yes", path = "/", httponly = true })
    assert(cookie:set { key = "count", value = "2", max_age = 60 })
    resp:send("a=" .. tostring(a) .. " all=" .. count(cookie:get_all()))
end)
