-- resp:set_trailer, by case:
--   /trailers?case=stream   two pieces, then grpc-status style trailers
--   /trailers?case=whole    resp:send with a trailer (sent streamed)
--   /trailers?case=raises   refused fields: each pcall's message, one a line
--   /trailers?case=req      req:trailers() of a request: "type count"
--   /trailers?case=late     a trailer after resp:send; ?case=late_seen then
--                           answers what that call returned
local refused = {
    { "Content-Length", "1" }, { "Transfer-Encoding", "chunked" },
    { "Host", "h" }, { "Authorization", "x" }, { "trailer", "x" },
    { "bad name", "1" }, { "X-Ctl", "a\r\nb" }, { "X-Type", true },
}

local late_seen = "none"

return function(req, resp)
    local case = req.query.case
    if case == "stream" then
        resp:write("hello ")
        assert(resp:set_trailer("Grpc-Status", 0))
        resp:write("world")
        resp:set_trailer("Grpc-Message", "ok")
    elseif case == "whole" then
        resp:set_trailer("X-Sum", "42")
        resp:send("whole")
    elseif case == "raises" then
        local out = {}
        for _, f in ipairs(refused) do
            local ok, err = pcall(resp.set_trailer, resp, f[1], f[2])
            out[#out + 1] = tostring(ok) .. " " .. tostring(err)
        end
        resp:send(table.concat(out, "\n"))
    elseif case == "late" then
        resp:send("sent")
        local ok, err = pcall(resp.set_trailer, resp, "X-Late", "1")
        late_seen = tostring(ok) .. " " .. tostring(err)
    elseif case == "req" then
        local t, n = req:trailers(), 0
        for _ in pairs(t) do n = n + 1 end
        resp:send(type(t) .. " " .. n)
    elseif case == "late_seen" then
        resp:send(late_seen)
    end
end
