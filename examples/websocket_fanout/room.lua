-- A chat room over WebSocket, fanned out through Redis pub/sub:
--   REDIS_URL=redis://127.0.0.1:6379/0 moonflow serve examples/websocket_fanout
-- then open ws://127.0.0.1:8080/room?name=NAME. Each text message a client
-- sends is published on the Redis channel "room:NAME"; every client in
-- the room, on any worker or any server sharing the Redis, receives what
-- is published there (a `redis-cli PUBLISH room:NAME hi` too).
--
-- One coroutine per socket does two waits at once: a thread of the
-- handler forwards the subscription's messages to the socket while the
-- handler itself receives from the client.
local mf = require "moonflow"

local redis = mf.redis(os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0")

-- Forwards the channel's messages to the socket until the subscription
-- or the socket ends.
local function forward(sub, ws)
    for msg in sub:messages() do
        if not ws:send_text(msg.payload) then break end
    end
end

return function(req, resp)
    local room = req.query.name
    if type(room) ~= "string" or not room:match("^[%w_%-]+$") then
        resp.status = 400
        resp:send("a room name of [A-Za-z0-9_-] expected: /room?name=NAME\n")
        return
    end
    local channel = "room:" .. room
    -- subscribed before the upgrade: a Redis that is down is a 503
    local sub, err = redis:subscribe(channel)
    if not sub then
        resp.status = 503
        resp:send("redis: " .. tostring(err) .. "\n")
        return
    end
    local ws = req:websocket { max_payload = 65536, ping_interval = 30 }
    if not ws then -- refused (answered with the reason)
        sub:close()
        return
    end
    local fan = mf.spawn(forward, sub, ws)
    while true do
        local typ, data = ws:recv()
        if typ == "text" then
            redis:call("PUBLISH", channel, data)
        elseif typ ~= "ping" and typ ~= "pong" then
            break -- the close (echoed), an error or the client gone
        end
    end
    sub:close() -- ends the forwarding thread's loop
    fan:wait()
end
