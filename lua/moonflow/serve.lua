-- moonflow.serve — the Lua side of `moonflow serve`'s response object and
-- the case-insensitive request header table. The C side (lua/serve/handler.c)
-- merges `response` (the methods written in Lua) into resp's methods.
local type, rawget, lower = type, rawget, string.lower
local cookie_line = require("moonflow.cookie").set_line

local M = { response = {} }

-- req.headers: keys are stored lowercase; any spelling finds them.
M.headers_mt = {
    __index = function(t, k)
        if type(k) == "string" then
            local l = lower(k)
            if l ~= k then return rawget(t, l) end
        end
    end,
}

-- resp:set_cookie(name, value [, opts]): one more Set-Cookie header
-- (moonflow.cookie checks and writes it; misuse raises, naming
-- resp:set_cookie).
function M.response.set_cookie(resp, name, value, opts)
    local line = cookie_line(resp, name, value, opts)
    local headers = resp.headers
    local now = headers["Set-Cookie"]
    if now == nil then
        headers["Set-Cookie"] = line
    elseif type(now) == "table" then
        now[#now + 1] = line
    else
        headers["Set-Cookie"] = { now, line }
    end
end

-- resp's __index: the methods (a table hit, no C call for resp:send),
-- then the C-side properties (status, headers, sent).
function M.index(methods, property)
    return function(resp, key)
        local m = methods[key]
        if m ~= nil then return m end
        return property(resp, key)
    end
end

return M
