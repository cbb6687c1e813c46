-- moonflow.ngx's request mapping (ngx_spec.lua): ngx.var, ngx.req and
-- ngx.header in a handler wrapped with ngx.handler, answered as JSON; a
-- Lua thread the handler spawns is the request's (what it read is kept).
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

return ngx.handler(function(req, resp)
    local t = mf.spawn(function() return pcall(function() return ngx.var.uri end) end)
    local _, ok_in_thread, thread_uri = t:wait()
    ngx.header.x_from_ngx = "set"
    ngx.req.read_body()
    resp:json {
        uri = ngx.var.uri, request_uri = ngx.var.request_uri, args = ngx.var.args,
        method = ngx.var.request_method, arg_a = ngx.var.arg_a, arg_flag = ngx.var.arg_flag,
        cookie_c = ngx.var.cookie_c, http_x_test = ngx.var.http_x_test,
        remote_addr = ngx.var.remote_addr, unknown = ngx.var.no_such_variable,
        get_method = ngx.req.get_method(), get_uri_args = ngx.req.get_uri_args(),
        header = ngx.req.get_headers()["X-Test"], body = ngx.req.get_body_data(),
        header_back = ngx.header["X-From-Ngx"], thread_had_request = ok_in_thread,
        thread_uri = thread_uri,
    }
end)
