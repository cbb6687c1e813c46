-- moonflow.resty_core — lua-resty-core (Debian's lua-resty-core) in moonflow.
-- Its modules replace ngx.* functions with FFI calls into nginx; moonflow's
-- binary exports the C functions of those that need no nginx request
-- (lua/ngx_ffi: resty.core.shdict, .time, .hash, .base64, .uri, .worker,
-- .utils, .regex, ngx.base64, ngx.re), so they load from their files and
-- run as written.
-- The others reach the request through nginx's request pointer, which
-- moonflow does not have: their API (ngx.var, ngx.ctx, ngx.exit,
-- ngx.req.*, ngx.header, ngx.get_phase ...) is moonflow.ngx's,
-- and requiring them (as require "resty.core" does) gives a module table
-- that leaves moonflow.ngx's functions in place. ngx.semaphore runs on
-- mf.semaphore.
--
-- The host requires this module when it makes a state: it only fills
-- package.preload, so nothing of it runs until such a module is required.
-- The stand-ins need `ngx` as resty.core.base does (require
-- "moonflow.ngx" first): they raise its error without it.
local preload = package.preload

local request_bound = {
    "resty.core.var", "resty.core.ctx", "resty.core.exit",
    "resty.core.request", "resty.core.response", "resty.core.phase",
    "resty.core.misc", "resty.core.ndk", "resty.core.socket",
    "resty.core.coroutine", "resty.core.param",
}

-- What the stand-in of a module holds besides its version.
local extras = {
    ["resty.core.ctx"] = function(m)
        function m.get_ctx_table(ctx) return ctx or ngx.ctx end
    end,
}

local function stand_in(name)
    return function()
        local base = require "resty.core.base" -- checks ngx and ngx.config
        local m = { version = base.version }
        if extras[name] then extras[name](m) end
        return m
    end
end

for _, name in ipairs(request_bound) do
    preload[name] = stand_in(name)
end

-- ngx.semaphore: new(n), sema:post(n), sema:wait(seconds) → true or nil,
-- "timeout", sema:count() (negative: that many waiters), as OpenResty's.
preload["ngx.semaphore"] = function()
    local base = require "resty.core.base"
    local mf = require "moonflow"
    local floor = math.floor

    local sema = {}
    sema.__index = sema

    local _M = { version = base.version }

    function _M.new(n)
        n = floor(tonumber(n) or 0)
        if n < 0 then return nil, "no negative number" end
        return setmetatable({ s = mf.semaphore(n), waiting = 0 }, sema)
    end

    function sema:post(n)
        n = floor(tonumber(n) or 1)
        if n < 1 then return nil, "positive number required" end
        self.s:post(n)
        return true
    end

    function sema:wait(seconds)
        seconds = tonumber(seconds) or 0
        if self.s:count() > 0 then return self.s:wait() end
        if seconds <= 0 then return nil, "timeout" end
        self.waiting = self.waiting + 1
        local ok, err = self.s:wait(math.max(1, floor(seconds * 1000 + 0.5)))
        self.waiting = self.waiting - 1
        return ok, err
    end

    function sema:count()
        local units = self.s:count()
        if units > 0 then return units end
        return -self.waiting
    end

    return _M
end

return true
