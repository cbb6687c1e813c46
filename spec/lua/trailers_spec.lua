-- resp:set_trailer through `moonflow serve` (spec/lua/site/trailers.lua on
-- MF_SERVE_PORT): the trailer section read byte for byte from a socket,
-- and the fields that may not be trailers refused with a clear error.
local mf = require "moonflow"

local port = tonumber(assert(os.getenv("MF_SERVE_PORT")))

-- Everything the server answers to one request that closes the connection.
local function raw(path)
    local sock = mf.socket.tcp()
    assert(sock:connect("127.0.0.1", port))
    assert(sock:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n"
                     .. "Connection: close\r\n\r\n"))
    local data, err, partial = sock:receive("*a")
    sock:close()
    return data or partial, err
end

local function body_of(answer)
    return answer:match("\r\n\r\n(.*)$")
end

describe("req:trailers", function()
    it("is an empty table when none were kept (HTTP/1 chunked passes them over)", function()
        local sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", port))
        assert(sock:send("POST /trailers?case=req HTTP/1.1\r\nHost: t\r\n"
            .. "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .. "3\r\nabc\r\n0\r\nX-Sum: 7\r\n\r\n"))
        local data, _, partial = sock:receive("*a")
        sock:close()
        assert.are.equal("table 0", body_of(data or partial))
    end)
end)

describe("resp:set_trailer", function()
    it("sends the trailer section after the last chunk", function()
        assert.are.equal("6\r\nhello \r\n5\r\nworld\r\n0\r\n"
            .. "Grpc-Status: 0\r\nGrpc-Message: ok\r\n\r\n",
            body_of(raw("/trailers?case=stream")))
    end)

    it("sends a whole answer with a trailer chunked", function()
        local answer = raw("/trailers?case=whole")
        assert.is_nil(answer:match("Content%-Length"))
        assert.are.equal("5\r\nwhole\r\n0\r\nX-Sum: 42\r\n\r\n", body_of(answer))
    end)

    it("raises on a field that may not be a trailer", function()
        local r = assert(mf.http.get("http://127.0.0.1:" .. port
                                     .. "/trailers?case=raises"))
        local lines = {}
        for line in r.body:gmatch("[^\n]+") do lines[#lines + 1] = line end
        assert.are.equal(8, #lines)
        for i = 1, 5 do
            assert.matches("^false .*may not be sent as a trailer", lines[i])
        end
        assert.matches('^false .*trailer "bad name" is not a valid field name',
                       lines[6])
        assert.matches("^false .*has a control byte", lines[7])
        assert.matches("^false .*a trailer value expected", lines[8])
    end)

    it("raises after the answer was sent", function()
        assert.are.equal("sent", body_of(raw("/trailers?case=late")))
        assert.matches("^false .*the request is over",
                       body_of(raw("/trailers?case=late_seen")))
    end)
end)
