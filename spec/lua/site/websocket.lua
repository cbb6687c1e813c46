-- req:websocket for websocket_spec.lua: says the protocol chosen, then
-- answers each message with "type:data" until the close (which the
-- server echoes); "misuse" answers what the misuses raise, one a line.
-- ?case=badopt: what a bad option raises.
local function raised(f, ...)
    local ok, err = pcall(f, ...)
    return tostring(ok) .. " " .. tostring(err)
end

return function(req, resp)
    if req.query.case == "badopt" then
        resp:send(raised(req.websocket, req, { max_payload = 0 }))
        return
    end
    local ws, err = req:websocket { protocols = { "chat", "superchat" } }
    if not ws then return end
    ws:send_text("protocol " .. tostring(ws.protocol))
    while true do
        local typ, data = ws:recv()
        if not typ or typ == "close" then break end
        if data == "misuse" then
            ws:send_text(table.concat({
                raised(ws.send_text, ws, "\255"),
                raised(ws.ping, ws, string.rep("x", 126)),
                raised(ws.close, ws, 1005),
                raised(req.websocket, req),
            }, "\n"))
        elseif data == "bye" then
            ws:close(4002, "asked")
        else
            ws:send_text(typ .. ":" .. data)
        end
    end
end
