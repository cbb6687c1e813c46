-- req:websocket under `moonflow serve` (spec/lua/site/websocket.lua,
-- MF_SERVE_PORT), with Debian's nginx.websocket.client (lua-nginx-websocket)
-- as the client through moonflow.ngx.
local mf = require "moonflow"
require "moonflow.ngx"
local client = require "nginx.websocket.client"

local port = assert(os.getenv("MF_SERVE_PORT"))
local uri = "ws://127.0.0.1:" .. port .. "/websocket"

local function open(protocols)
    local wb = assert(client:new { timeout = 2000, max_payload_len = 1048576 })
    assert(wb:connect(uri, protocols and { protocols = protocols } or nil))
    return wb
end

describe("req:websocket", function()
    it("chooses the server's first protocol the client offers", function()
        local wb = open { "superchat", "chat" }
        assert.are.same({ "protocol chat", "text" }, { wb:recv_frame() })
        wb:close()
        wb = open()
        assert.are.same({ "protocol nil", "text" }, { wb:recv_frame() })
        wb:close()
    end)

    it("returns text, binary and big messages from recv", function()
        local wb = open()
        wb:recv_frame()
        assert(wb:send_text("hello"))
        assert.are.same({ "text:hello", "text" }, { wb:recv_frame() })
        assert(wb:send_binary("\0\1\2"))
        assert.are.same({ "binary:\0\1\2", "text" }, { wb:recv_frame() })
        local big = string.rep("0123456789", 6000)
        assert(wb:send_text(big))
        assert.are.equal("text:" .. big, (wb:recv_frame()))
        wb:close()
    end)

    it("answers a ping with a pong and still shows it to recv", function()
        local wb = open()
        wb:recv_frame()
        assert(wb:send_ping("are you there"))
        assert.are.same({ "are you there", "pong" }, { wb:recv_frame() })
        assert.are.same({ "ping:are you there", "text" }, { wb:recv_frame() })
        wb:close()
    end)

    it("echoes the client's close code, and closes with its own", function()
        local wb = open()
        wb:recv_frame()
        assert(wb:send_close(4001, "done"))
        local data, typ, code = wb:recv_frame()
        assert.are.same({ "", "close", 4001 }, { data, typ, code })
        wb:close()
        wb = open()
        wb:recv_frame()
        assert(wb:send_text("bye"))
        data, typ, code = wb:recv_frame()
        assert.are.same({ "asked", "close", 4002 }, { data, typ, code })
        wb:close()
    end)

    it("raises on misuse, naming what is wrong", function()
        local wb = open()
        wb:recv_frame()
        assert(wb:send_text("misuse"))
        local lines = {}
        for line in (wb:recv_frame()):gmatch("[^\n]+") do
            lines[#lines + 1] = line
        end
        assert.matches("^false .*UTF%-8 text expected", lines[1])
        assert.matches("^false .*at most 125 bytes expected", lines[2])
        assert.matches("^false .*a close code of", lines[3])
        -- a second upgrade: the answer's head is out already
        assert.matches("^true nil", lines[4])
        wb:close()
        local r = assert(mf.http.get("http://127.0.0.1:" .. port
                                     .. "/websocket?case=badopt"))
        assert.matches("^false .*bad option max_payload", r.body)
    end)

    it("refuses a request that is no websocket handshake", function()
        local r = assert(mf.http.get("http://127.0.0.1:" .. port .. "/websocket"))
        assert.are.equal(426, r.status)
        assert.are.equal("websocket", r.headers["upgrade"])
        assert.are.equal("Upgrade: websocket expected\n", r.body)
    end)
end)
