-- mf.socket (cosockets) against real peers on 127.0.0.1: the redis-server
-- run_specs.py starts (MF_REDIS_URL), spoken to in RESP by hand, and the
-- peers of socket_peers.py: a TCP server whose first line picks a
-- behaviour (echo, reset, silent, pieces, all, close-later, stall), the
-- same over TLS with the specs' self-signed certificate (MF_CA_FILE) and
-- on a unix socket, a UDP echo, and a listener that never accepts.
local mf = require "moonflow"

local port = tonumber(assert(os.getenv("MF_SOCK_PORT")))
local tls_port = tonumber(assert(os.getenv("MF_SOCK_TLS_PORT")))
local unix_path = assert(os.getenv("MF_SOCK_UNIX"))
local udp_port = tonumber(assert(os.getenv("MF_SOCK_UDP_PORT")))
local hole_port = tonumber(assert(os.getenv("MF_SOCK_BLACKHOLE_PORT")))
local dead_port = tonumber(assert(os.getenv("MF_DEAD_PORT")))
local ca_file = assert(os.getenv("MF_CA_FILE"))
local redis_host, redis_port =
    assert(os.getenv("MF_REDIS_URL")):match("^redis://([^:/]+):(%d+)")

-- A socket connected to the script server, its behaviour asked for.
local function script(what, opts)
    local sock = mf.socket.tcp()
    assert(sock:connect("127.0.0.1", port, opts))
    if what then assert(sock:send(what .. "\n")) end
    return sock
end

-- This process's sockets connected to the script server: the inodes of
-- its descriptors (fcntl and readlink on each of the first 4096: no child
-- process) met in /proc/net/tcp with the server's port as the remote
-- one. Idle pooled connections of other specs, to other servers, expire
-- meanwhile without changing the count.
local ffi = require "ffi"
pcall(ffi.cdef, [[int fcntl(int fd, int cmd, ...);
long readlink(const char *path, char *buf, size_t size);]])
local function peer_sockets()
    local mine, buf = {}, ffi.new("char[64]")
    for fd = 0, 4095 do
        if ffi.C.fcntl(fd, 1) ~= -1 then -- F_GETFD
            local n = tonumber(ffi.C.readlink("/proc/self/fd/" .. fd, buf, 64))
            local inode = n > 0 and ffi.string(buf, n):match("^socket:%[(%d+)%]$")
            if inode then mine[inode] = true end
        end
    end
    local count, want = 0, string.format("%04X", port)
    for line in io.lines("/proc/net/tcp") do
        local rport, inode = line:match(
            "^%s*%d+:%s+%x+:%x+%s+%x+:(%x+)%s+%x+%s+%S+%s+%S+%s+%S+%s+%d+%s+%d+%s+(%d+)")
        if rport == want and mine[inode] then count = count + 1 end
    end
    return count
end

describe("mf.socket.tcp", function()
    it("speaks RESP to redis-server by hand", function()
        local sock = mf.socket.tcp()
        assert.are.equal(1, sock:connect(redis_host, tonumber(redis_port)))
        local set = { "*3\r\n", { "$3\r\nSET\r\n", "$8\r\nsock:key\r\n" },
                      "$", 5, "\r\nhello\r\n" }
        assert.are.equal(#table.concat({ "*3\r\n", "$3\r\nSET\r\n",
            "$8\r\nsock:key\r\n", "$5\r\nhello\r\n" }), sock:send(set))
        assert.are.equal("+OK", sock:receive())
        sock:send("*2\r\n$3\r\nGET\r\n$8\r\nsock:key\r\n")
        assert.are.equal("$5", sock:receive("*l"))
        assert.are.equal("hello", sock:receive(5))
        assert.are.equal("", sock:receive("l"))
        -- a pipeline of two, answered in one read
        sock:send("*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINCR\r\n$8\r\nsock:key\r\n")
        assert.are.equal("+PONG", sock:receive())
        assert.matches("^%-ERR", sock:receive())
        assert.are.equal(1, sock:close())
        assert.are.same({ nil, "closed" }, { sock:close() })
    end)

    it("reads lines, counts and everything up to the end", function()
        local sock = script("echo")
        assert.are.equal(15, sock:send("one\r\ntwo\nthree\n"))
        assert.are.equal("one", sock:receive("*l"))
        assert.are.equal("two", sock:receive())
        assert.are.equal("thr", sock:receive("3")) -- a numeric string counts
        assert.are.equal("ee", sock:receive("l"))
        assert.are.equal("", sock:receive(0))
        sock:close()
        sock = script("all")
        assert.are.equal("hello world", sock:receive("*a"))
        assert.are.same({ nil, "closed" }, { sock:receive() })
    end)

    it("gives nil, 'closed' and the partial data when the peer closes", function()
        local sock = script("all")
        assert.are.same({ nil, "closed", "hello world" }, { sock:receive(100) })
        sock = script("all")
        assert.are.same({ nil, "closed", "hello world" }, { sock:receive() })
        assert.are.same({ nil, "closed" }, { sock:send("x") })
    end)

    it("gives nil, 'connection reset by peer' and the partial data on a reset", function()
        local sock = script("reset")
        local data, err, partial = sock:receive(100)
        assert.is_nil(data)
        assert.are.equal("connection reset by peer", err)
        assert.are.equal("partial", partial)
        assert.are.same({ nil, "closed" }, { sock:receive() })
    end)

    it("returns nil, 'connection refused' for a port nobody listens on", function()
        local sock = mf.socket.tcp()
        assert.are.same({ nil, "connection refused" },
                        { sock:connect("127.0.0.1", dead_port) })
        assert.are.same({ nil, "closed" }, { sock:send("x") })
    end)

    it("says a name does not resolve", function()
        local sock = mf.socket.tcp()
        sock:settimeout(3000)
        local ok, err = sock:connect("no-such-host.invalid", 80)
        assert.is_nil(ok)
        assert.is_true(err == "no-such-host.invalid could not be resolved"
                       or err == "timeout", err)
    end)

    it("times out every wait: connect, read, send, receiveuntil", function()
        local sock = mf.socket.tcp()
        sock:settimeouts(150, 1000, 1000)
        local t0 = mf.now()
        assert.are.same({ nil, "timeout" }, { sock:connect("127.0.0.1", hole_port) })
        assert.is_true(mf.now() - t0 >= 140)

        sock = script("silent")
        sock:settimeout(100)
        assert.are.same({ nil, "timeout", "" }, { sock:receive() })
        -- a read timeout leaves the connection usable
        assert.are.equal(2, sock:send("x\n"))
        assert.are.same({ nil, "timeout", "" }, { sock:receive(10) })
        assert.are.same({ nil, "timeout", "" }, { sock:receive("*a") })
        assert.are.same({ nil, "timeout", "" }, { sock:receiveuntil("--")() })
        sock:close()

        sock = script("stall")
        sock:settimeouts(1000, 100, 1000)
        local ok, err = sock:send(string.rep("x", 64 * 1024 * 1024))
        assert.is_nil(ok)
        assert.are.equal("timeout", err)
        assert.are.same({ nil, "closed" }, { sock:send("x") })
    end)

    it("reads up to a pattern across pieces with receiveuntil", function()
        local sock = script("pieces")
        local reader = sock:receiveuntil("--boundary--")
        assert.are.equal("abc", reader())
        assert.are.equal("def", sock:receive())
        assert.are.same({ nil, "closed", "last" }, { reader() })

        sock = script("pieces")
        assert.are.equal("abc--boundary--",
                         sock:receiveuntil("--boundary--", { inclusive = true })())
        sock:close()
    end)

    it("hands receiveuntil's data out in chunks of at most size bytes", function()
        local sock = script("pieces")
        local reader = sock:receiveuntil("--boundary--")
        local chunks = {}
        while true do
            local data, err = reader(2)
            assert.is_nil(err)
            if not data then break end
            assert.is_true(#data >= 1 and #data <= 2)
            chunks[#chunks + 1] = data
        end
        assert.are.equal("abc", table.concat(chunks))
        assert.are.equal("def", sock:receive())
        sock:close()
    end)

    it("connects to a unix socket", function()
        local sock = mf.socket.tcp()
        assert.are.equal(1, sock:connect("unix:" .. unix_path))
        sock:send({ "echo\n", "over unix\n" })
        assert.are.equal("over unix", sock:receive())
        sock:close()
        assert.are.same({ nil, "no such file or directory" },
                        { mf.socket.tcp():connect("unix:/nonexistent/x.sock") })
    end)

    it("reuses a kept-alive connection and counts its reuses", function()
        local sock = script("echo")
        sock:send("ping\n")
        assert.are.equal("ping", sock:receive())
        assert.are.equal(0, sock:getreusedtimes())
        assert.are.equal(1, sock:setkeepalive(10000, 4))
        assert.are.same({ nil, "closed" }, { sock:send("x") })
        sock = mf.socket.tcp()
        assert.are.equal(1, sock:connect("127.0.0.1", port))
        assert.are.equal(1, sock:getreusedtimes())
        sock:send("again\n")
        assert.are.equal("again", sock:receive())
        assert.are.equal(1, sock:setkeepalive())
        -- another pool name is another pool
        local other = script(nil, { pool = "elsewhere" })
        assert.are.equal(0, other:getreusedtimes())
        other:close()
        sock = script(nil)
        assert.are.equal(2, sock:getreusedtimes())
        sock:close()
    end)

    it("never hands out a pooled connection the peer closed", function()
        local sock = script("close-later")
        assert.are.equal("ok", sock:receive())
        assert.are.equal(1, sock:setkeepalive(10000, 4))
        mf.sleep(400) -- the peer closes the idle connection meanwhile
        sock = mf.socket.tcp()
        assert.are.equal(1, sock:connect("127.0.0.1", port))
        assert.are.equal(0, sock:getreusedtimes())
        sock:send("echo\nfresh\n")
        assert.are.equal("fresh", sock:receive())
        sock:close()
    end)

    it("refuses to keep a connection with unread data", function()
        local sock = script("all")
        assert.are.equal("hello", sock:receive(5))
        assert.are.same({ nil, "unread data in buffer" }, { sock:setkeepalive() })
        assert.are.same({ nil, "closed" }, { sock:receive() })
    end)

    it("closes the old connection before a reconnect's arguments are checked", function()
        local sock = script("echo")
        -- the refused option must not leave the first connection open
        -- under the new name, where setkeepalive would pool it
        assert.has_error(function()
            sock:connect("127.0.0.1", port, { pool = "renamed", backlog = 1 })
        end)
        assert.are.same({ nil, "closed" }, { sock:setkeepalive() })
        local other = script(nil, { pool = "renamed" })
        assert.are.equal(0, other:getreusedtimes())
        other:close()
    end)

    it("fails TLS verification of a self-signed certificate by default", function()
        local sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port))
        local ok, err = sock:sslhandshake(false, "localhost")
        assert.is_nil(ok)
        assert.matches("self%-signed certificate", err)
        assert.are.same({ nil, "closed" }, { sock:send("x") })
    end)

    it("passes TLS with the CA given, or with verification off", function()
        local sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port))
        assert.is_true(sock:sslhandshake(false, "localhost", { ca_file = ca_file }))
        sock:send("echo\nover tls\n")
        assert.are.equal("over tls", sock:receive())
        sock:close()

        sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port))
        assert.is_true(sock:sslhandshake(nil, "localhost", false))
        sock:send("all\n")
        assert.are.equal("hello world", sock:receive("*a"))
    end)

    it("fails TLS when the name does not match the certificate", function()
        local sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port))
        local ok, err = sock:sslhandshake(false, "example.com",
                                          { ca_file = ca_file })
        assert.is_nil(ok)
        assert.matches("hostname mismatch", err)
    end)

    it("keeps the TLS session of a pooled connection", function()
        local sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port, { pool = "tls-pool" }))
        assert(sock:sslhandshake(false, "localhost", { ca_file = ca_file }))
        sock:send("echo\none\n")
        assert.are.equal("one", sock:receive())
        assert(sock:setkeepalive())
        sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port, { pool = "tls-pool" }))
        assert.are.equal(1, sock:getreusedtimes())
        assert.is_true(sock:sslhandshake(false, "localhost", { ca_file = ca_file }))
        sock:send("two\n")
        assert.are.equal("two", sock:receive())
        -- a session checked for localhost never serves another name
        assert(sock:setkeepalive())
        sock = mf.socket.tcp()
        assert(sock:connect("127.0.0.1", tls_port, { pool = "tls-pool" }))
        assert.are.equal(2, sock:getreusedtimes())
        local ok, err = sock:sslhandshake(false, "127.0.0.1", { ca_file = ca_file })
        assert.is_nil(ok)
        assert.matches("another server name", err)
        assert.are.same({ nil, "closed" }, { sock:send("x") })
    end)

    it("works inside plain coroutines", function()
        local co = coroutine.wrap(function(what)
            local sock = script("echo")
            sock:send(what .. "\n")
            local line = sock:receive()
            sock:close()
            return line
        end)
        assert.are.equal("inside", co("inside"))
    end)

    it("lets one thread read while another writes, and refuses a second reader", function()
        local sock = script("echo")
        local reader = mf.spawn(function() return sock:receive() end)
        mf.sleep(10)
        assert.are.same({ nil, "socket busy reading" }, { sock:receive() })
        sock:send("crossed\n")
        assert.are.same({ true, "crossed" }, { reader:wait() })
        sock:close()
    end)

    it("ends a wait with 'closed' when another thread closes the socket", function()
        local sock = script("silent")
        local reader = mf.spawn(function() return sock:receive() end)
        mf.sleep(10)
        assert.are.equal(1, sock:close())
        -- until the reader has its answer, the object is still busy
        assert.are.same({ nil, "socket busy" }, { sock:connect("127.0.0.1", port) })
        assert.are.same({ true, nil, "closed", "" }, { reader:wait() })
        assert.are.equal(1, sock:connect("127.0.0.1", port))
        sock:send("echo\nafter\n")
        assert.are.equal("after", sock:receive())
        sock:close()
    end)

    it("closes sockets left open when their coroutine ends, and collected ones", function()
        local before = peer_sockets()
        local t = mf.spawn(function()
            for _ = 1, 3 do script("echo") end
            return peer_sockets()
        end)
        assert.are.same({ true, before + 3 }, { t:wait() })
        assert.are.equal(before, peer_sockets())
        local held = script("echo")
        assert.are.equal(before + 1, peer_sockets())
        held = nil -- luacheck: ignore
        collectgarbage()
        collectgarbage()
        assert.are.equal(before, peer_sockets())
    end)

    it("raises on misuse", function()
        local sock = mf.socket.tcp()
        assert.has_error(function() sock:connect() end)
        assert.has_error(function() sock:connect("127.0.0.1", 0) end)
        assert.has_error(function() sock:connect("127.0.0.1", 70000) end)
        assert.has_error(function() sock:connect("127.0.0.1", port, { backlog = 10 }) end)
        assert.has_error(function() sock:connect("127.0.0.1", port, { pool = 3 }) end)
        assert.has_error(function() sock:settimeout(-1) end)
        assert.has_error(function() sock:receiveuntil("") end)
        sock = script("echo")
        assert.has_error(function() sock:receive("*x") end)
        assert.has_error(function() sock:receive(-1) end)
        assert.has_error(function() sock:send(true) end)
        assert.has_error(function() sock:send({ "a", { false } }) end)
        assert.has_error(function() sock.send(42, "x") end)
        sock:close()
    end)

    it("connects in one call with mf.socket.connect", function()
        local sock = assert(mf.socket.connect("127.0.0.1", port))
        sock:send("echo\nhi\n")
        assert.are.equal("hi", sock:receive())
        sock:close()
        assert.are.same({ nil, "connection refused" },
                        { mf.socket.connect("127.0.0.1", dead_port) })
    end)
end)

describe("mf.socket.udp", function()
    it("sends and receives datagrams", function()
        local u = mf.socket.udp()
        assert.are.equal(1, u:setpeername("127.0.0.1", udp_port))
        assert.are.equal(1, u:send("ping"))
        assert.are.equal("ping", u:receive())
        assert.are.equal(1, u:send({ "a", 1, { "b" } }))
        assert.are.equal("a1", u:receive(2)) -- cut to size
        assert.are.equal(1, u:send("")) -- an empty datagram, echoed
        assert.are.equal("", u:receive())
        assert.are.equal(1, u:close())
        assert.are.same({ nil, "closed" }, { u:close() })
        assert.are.same({ nil, "closed" }, { u:send("x") })
    end)

    it("times out a receive nobody answers", function()
        local u = mf.socket.udp()
        assert(u:setpeername("127.0.0.1", udp_port))
        u:settimeout(100)
        assert.are.same({ nil, "timeout" }, { u:receive() })
        u:close()
    end)
end)
