-- /phases?key=K&case=...: a route with every phase. Each phase appends
-- "name=ngx.get_phase()" to req.ctx.order (ngx.ctx, the same table); the
-- log phase stores the order under order:K (phases_spec.lua). Cases:
--   send, json, write, redirect: the content answers so (the filters add
--     X-Filtered, upper-case the body and append "|eof" to its last piece)
--   deny: access answers 403 with ngx.exit; ok: access ends with ngx.exit(ngx.OK)
--   raise: the content raises (a 500); exit204: ngx.exit(204) in content
--   status: the header filter turns the status into 202
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

local locks = mf.shared_dict("phase_locks", 1048576)

local function mark(name)
    local order = ngx.ctx.order or {}
    ngx.ctx.order = order
    order[#order + 1] = name .. "=" .. ngx.get_phase()
end

return {
    rewrite = function(req)
        mark("rewrite")
        assert(req.ctx == ngx.ctx)
    end,
    access = function(req)
        mark("access")
        if req.query.case == "deny" then ngx.exit(403) end
        if req.query.case == "ok" then ngx.exit(ngx.OK) end
        if req.query.case == "error" then ngx.exit(ngx.ERROR) end
    end,
    content = function(req, resp)
        mark("content")
        local case = req.query.case
        if case == "json" then
            resp:json { a = "b" }
        elseif case == "write" then
            resp:write("one ")
            resp:write("two")
        elseif case == "redirect" then
            resp:redirect("/elsewhere")
        elseif case == "raise" then
            error("content failed on purpose")
        elseif case == "exit204" then
            ngx.exit(204)
            error("not reached")
        elseif case == "timer" then
            local key = req.query.key -- req is not the timer's
            mf.timer.at(0, function()
                locks:set("timer:" .. key, ngx.get_phase())
                ngx.exit(ngx.OK) -- ends the timer's coroutine
                locks:set("timer:" .. key, "not ended by ngx.exit")
            end)
            resp:send("timer")
        else
            resp:send("sent")
        end
    end,
    header_filter = function(req, resp)
        mark("header_filter")
        resp.headers["X-Filtered"] = "yes"
        if req.query.case == "status" then resp.status = 202 end
    end,
    body_filter = function(_, resp, chunk, eof)
        mark("body_filter")
        if resp.status == 204 then return chunk end -- no body there
        return chunk:upper() .. (eof and "|eof" or "")
    end,
    log = function(req, resp)
        mark("log")
        locks:set("order:" .. req.query.key,
            table.concat(ngx.ctx.order, " ") .. " status=" .. resp.status)
    end,
}
