-- moonflow.ngx in a plain handler (no ngx.handler wrapper), as OpenResty
-- handlers use it (ngx_spec.lua): ?case=NAME picks what it does.
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

local cases = {}

-- What the last "eof" request could still do after ngx.eof (read by the
-- next request: one worker serves the specs).
local after_eof

function cases.vars(req, resp)
    local v = ngx.var
    local out = {
        remote_addr = v.remote_addr, binary_remote_addr = mf.hex.encode(v.binary_remote_addr),
        remote_port = v.remote_port, server_addr = v.server_addr, server_port = v.server_port,
        scheme = v.scheme, https = v.https, host = v.host, hostname = v.hostname,
        request_method = v.request_method, request_uri = v.request_uri, uri = v.uri,
        document_uri = v.document_uri, args = v.args, is_args = v.is_args,
        arg_a = v.arg_a, arg_upper = v.arg_UPPER, arg_flag = v.arg_flag, arg_esc = v.arg_esc,
        http_x_test = v.http_x_test, http_x_multi = v.http_x_multi, cookie_c = v.cookie_c,
        content_type = v.content_type, content_length = v.content_length,
        request_length = v.request_length, request_time = v.request_time,
        status = v.status, body_bytes_sent = v.body_bytes_sent, request_id = v.request_id,
        request = v.request, server_protocol = v.server_protocol, request_body = v.request_body,
        msec = v.msec, nginx_version = v.nginx_version, unknown = v.no_such_variable,
        raw_header_len = #req.raw_header, body_len = #req.body,
    }
    v.my_var = "mine"
    out.my_var = v.my_var
    v.args = "x=1&y=2"
    out.args_after = v.args
    out.arg_x_after = v.arg_x
    out.uri_not_changeable = select(2, pcall(function() v.uri = "/x" end))
    out.query_string_not_changeable = select(2, pcall(function() v.query_string = "a=1" end))
    out.http_not_changeable = select(2, pcall(function() v.http_x_test = "x" end))
    resp:json(out)
end

function cases.req(req, resp)
    local r = ngx.req
    local out = {}
    local h = r.get_headers()
    out.header_lower = h["x-test"]
    out.header_underscore = h.x_test
    out.header_multi = h["x-multi"]
    local _, truncated = r.get_headers(1)
    out.truncated = truncated
    local raw = r.get_headers(0, true)
    out.raw_case = raw["X-Test"]
    r.set_header("X-Added", "yes")
    r.clear_header("X-Test")
    out.after_set = r.get_headers()["x-added"]
    out.var_after_set = ngx.var.http_x_added
    out.cleared = r.get_headers()["x-test"] == nil
    out.uri_args = r.get_uri_args()
    r.set_uri_args { k = "v w" }
    out.uri_args_after = r.get_uri_args()
    out.var_args_after = ngx.var.args
    r.set_uri("/elsewhere")
    out.uri_after = ngx.var.uri
    out.set_uri_jump = select(2, pcall(r.set_uri, "/x", true))
    r.read_body()
    out.body = r.get_body_data()
    out.post_args = r.get_post_args()
    out.body_file = r.get_body_file() == nil
    out.http_version = r.http_version()
    out.raw_header = r.raw_header()
    out.raw_header_no_line = r.raw_header(true)
    out.start_time_ago = ngx.now() - r.start_time()
    out.method = r.get_method()
    r.set_method(ngx.HTTP_PUT)
    out.method_after = r.get_method()
    out.var_method_after = ngx.var.request_method
    out.is_internal = r.is_internal()
    out.is_subrequest = ngx.is_subrequest
    out.set_body_file = select(2, pcall(r.set_body_file, "/tmp/x"))
    resp:json(out)
end

function cases.say()
    ngx.status = 201
    ngx.header.x_a = "1"
    ngx.header["X-Multi"] = { "a", "b" }
    ngx.header.content_type = "text/x-ngx"
    ngx.header.content_length = 999 -- the server frames the answer itself
    local before = {
        status = ngx.status, x_a = ngx.header["X-A"], multi = ngx.header.x_multi,
        content_length = ngx.header["Content-Length"], sent = ngx.headers_sent,
    }
    local rh = ngx.resp.get_headers()
    before.resp_x_a, before.resp_type = rh.x_a, rh["content-type"]
    assert(ngx.say("a", 1, true, nil, ngx.null, { "b", { "c" } }) == 1)
    before.sent_after = ngx.headers_sent
    ngx.status = 500             -- too late: logged and left
    ngx.header.x_late = "late"   -- too late too
    ngx.print(mf.json.encode(before))
    assert(ngx.flush(true) == 1)
    ngx.print("\nend:", ngx.status)
end

function cases.bad_say()
    local ok, err = pcall(ngx.say, { a = 1 })
    local ok2, err2 = pcall(ngx.print, function() end)
    ngx.say(tostring(ok), " ", err)
    ngx.say(tostring(ok2), " ", err2)
end

function cases.eof()
    ngx.say("before eof")
    assert(ngx.eof() == 1)
    local ok, err = ngx.say("after")
    mf.sleep(300) -- the client has its whole answer by now
    after_eof = { ok = ok, err = err, uri = ngx.var.uri, status = ngx.var.status,
                  request_time = ngx.var.request_time, method = ngx.req.get_method(),
                  arg = ngx.var.arg_x, header = ngx.var.http_x_test, sent = ngx.headers_sent,
                  set_status = select(2, pcall(function() ngx.status = 500 end)),
                  eof_again = select(2, ngx.eof()) }
end

function cases.eof_result(_, resp) resp:json(after_eof or {}) end

function cases.send_headers()
    ngx.header.x_early = "yes"
    assert(ngx.send_headers() == 1)
    local sent = ngx.headers_sent
    local again, err = ngx.send_headers()
    ngx.say("sent=", sent, " again=", again, " ", err)
end

-- A 101 head is left for the raw connection: send_headers and flush only
-- mark it sent (here the handler then answers as usual, which shows no
-- stream was started).
function cases.upgrade_head(_, resp)
    ngx.status = 101
    ngx.header.upgrade = "websocket"
    assert(ngx.send_headers() == 1)
    assert(ngx.flush(true) == 1)
    local sent = ngx.headers_sent
    resp.status = 200
    resp:send("sent=" .. tostring(sent) .. " streaming=" .. tostring(resp.sent))
end

function cases.redirect()
    ngx.redirect("/ok?from=ngx", ngx.HTTP_MOVED_PERMANENTLY)
end

function cases.bad_redirect()
    ngx.say(select(2, pcall(ngx.redirect, "/ok", 200)))
end

function cases.capture(_, resp)
    local res = ngx.location.capture("/ngx_api?case=sub", { args = { n = 1 } })
    resp:json { status = res.status, body = res.body, header = res.header["x-sub"],
                parent_sub = ngx.is_subrequest }
end

function cases.sub()
    ngx.header.x_sub = "yes"
    ngx.status = 202
    ngx.print(ngx.var.uri, " ", ngx.var.args, " ", tostring(ngx.is_subrequest), " ",
              ngx.req.get_uri_args().n)
end

function cases.thread(_, resp)
    local t = mf.spawn(function() return pcall(function() return ngx.var.uri end) end)
    local _, ok, err = t:wait()
    resp:json { ok = ok, err = err }
end

return function(req, resp)
    local case = cases[req.query.case]
    if not case then
        resp.status = 400
        return resp:send("no such case")
    end
    return case(req, resp)
end
