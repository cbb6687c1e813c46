-- mf.upstream: groups, their policies and run-time changes, a balancer and
-- a key function, and mf.http through a group against the test fixture
-- (MF_HTTP_PORT) and a port where nothing listens (MF_DEAD_PORT).
local mf = require "moonflow"

local port = tonumber(os.getenv("MF_HTTP_PORT"))
local dead = tonumber(os.getenv("MF_DEAD_PORT") or "1")

-- libketama's placement, computed here from MD5 alone: server i gets
-- floor(40 * n * w_i / W) digests of "address-k", four points each
-- (little-endian words); a key goes to the first point at or after the
-- first word of its own MD5.
local function le32(s, at)
    local a, b, c, d = s:byte(at, at + 3)
    return ((d * 256 + c) * 256 + b) * 256 + a
end

local function ketama(servers)
    local total, points = 0, {}
    for _, s in ipairs(servers) do total = total + s[2] end
    for _, s in ipairs(servers) do
        for k = 0, math.floor(40 * #servers * s[2] / total) - 1 do
            local d = mf.crypto.md5(s[1] .. "-" .. k)
            for h = 0, 3 do points[#points + 1] = {le32(d, 4 * h + 1), s[1]} end
        end
    end
    table.sort(points, function(a, b) return a[1] < b[1] end)
    return function(key)
        local h = le32(mf.crypto.md5(key), 1)
        local lo, hi = 1, #points + 1
        while lo < hi do
            local mid = math.floor((lo + hi) / 2)
            if points[mid][1] < h then lo = mid + 1 else hi = mid end
        end
        return points[lo] and points[lo][2] or points[1][2]
    end
end

describe("mf.upstream", function()
    it("defines a group, finds it by name, and says nil for no group", function()
        local up = mf.upstream("spec_a", { servers = { "127.0.0.1:9001" } })
        assert.are.equal("spec_a", up.name)
        assert.are.equal("spec_a", mf.upstream("spec_a").name)
        assert.is_nil(mf.upstream("spec_none"))
    end)

    it("refuses a bad definition naming what is wrong", function()
        assert.has_error(function() mf.upstream("spec_b", { servers = { "x" } }) end,
            "mf.upstream: 'spec_b': server 'x' is not host:port")
        assert.has_error(function()
            mf.upstream("spec_b", { servers = {}, polcy = "random" })
        end, "mf.upstream: unknown key 'polcy'")
        assert.has_error(function()
            mf.upstream("spec_b", { servers = {}, policy = "fastest" })
        end)
        assert.has_error(function() mf.upstream({}) end)
        assert.has_error(function() mf.upstream("bad name", { servers = {} }) end)
    end)

    it("places keys where libketama does, and moves only a down server's", function()
        local list = { { "127.0.0.1:7001", 3 }, { "127.0.0.1:7002", 1 },
                       { "127.0.0.1:7003", 2 }, { "127.0.0.1:7004", 1 } }
        local servers = {}
        for i, s in ipairs(list) do servers[i] = { s[1], weight = s[2] } end
        local up = mf.upstream("spec_ring", { servers = servers,
                                              policy = "consistent_hash" })
        local ref = ketama(list)
        for i = 1, 10000 do
            local key = "user:" .. i
            assert.are.equal(ref(key), up:pick(key))
        end
    end)

    it("lists servers with their state and changes them at run time", function()
        local up = mf.upstream("spec_c", { servers = { "127.0.0.1:9001",
            { "127.0.0.1:9002", weight = 3, backup = true } } })
        local s = up:servers()
        assert.are.equal(2, #s)
        assert.are.equal("127.0.0.1:9001", s[1].address)
        assert.are.equal("up", s[1].state)
        assert.are.equal(3, s[2].weight)
        assert.is_true(s[2].backup)
        assert.is_true(up:add("127.0.0.1:9003", { weight = 2 }))
        local ok, err = up:add("127.0.0.1:9003")
        assert.is_nil(ok)
        assert.are.equal("already a server: 127.0.0.1:9003", err)
        assert.is_true(up:weight("127.0.0.1:9003", 5))
        assert.is_true(up:drain("127.0.0.1:9001"))
        for _ = 1, 10 do assert.are.equal("127.0.0.1:9003", up:pick()) end
        assert.is_true(up:remove("127.0.0.1:9003"))
        assert.are.equal("127.0.0.1:9002", up:pick()) -- the backup now
        assert.is_true(up:drain("127.0.0.1:9001", false))
        assert.are.equal("127.0.0.1:9001", up:pick())
        ok, err = up:remove("127.0.0.1:9999")
        assert.are.equal("no such server: 127.0.0.1:9999", err)
        assert.has_error(function() up:weight("127.0.0.1:9001", 0) end)
    end)

    it("sends mf.http to a live server and skips a dead one", function()
        mf.upstream("spec_http", { servers = { "127.0.0.1:" .. dead,
            "127.0.0.1:" .. port }, max_fails = 1, fail_timeout = 60 })
        for _ = 1, 4 do
            local r, err = mf.http.get("http://spec_http/")
            assert.is_nil(err)
            assert.are.equal(200, r.status)
        end
        local s = mf.upstream("spec_http"):servers()
        assert.are.equal("down", s[1].state)
        assert.are.equal(1, s[1].failures)
    end)

    it("fails with no live upstream when every server is out", function()
        mf.upstream("spec_gone", { servers = { "127.0.0.1:" .. dead },
                                   max_fails = 1, fail_timeout = 60 })
        local r, err = mf.http.get("http://spec_gone/")
        assert.is_nil(r)
        assert.truthy(err:find("^connection refused: http://127.0.0.1:%d+ %(upstream 'spec_gone'%)"))
        r, err = mf.http.get("http://spec_gone/")
        assert.are.equal("no live upstream: 'spec_gone'", err)
    end)

    it("connects a cosocket to a live server of a group", function()
        mf.upstream("spec_sock", { servers = { "127.0.0.1:" .. dead,
            "127.0.0.1:" .. port }, max_fails = 1, fail_timeout = 60 })
        for _ = 1, 3 do
            local sock = mf.socket.tcp()
            assert(sock:connect("spec_sock", 80)) -- the port is the servers'
            assert(sock:send("GET / HTTP/1.0\r\n\r\n"))
            assert.are.equal("HTTP/1.1 200 OK", sock:receive("*l"))
            sock:close()
        end
        mf.upstream("spec_sock_gone", { servers = { "127.0.0.1:" .. dead },
                                        max_fails = 1, fail_timeout = 60 })
        local _, err = mf.socket.tcp():connect("spec_sock_gone", 80)
        assert.are.equal("connection refused", err)
        _, err = mf.socket.tcp():connect("spec_sock_gone", 80)
        assert.are.equal("no live upstream", err)
    end)

    it("opens MySQL connections on a live server of a group", function()
        local url = assert(os.getenv("MF_MYSQL_URL"))
        local hostport = assert(url:match("@([^/]+)/"))
        mf.upstream("spec_db", { servers = { "127.0.0.1:" .. dead, hostport },
                                 max_fails = 1, fail_timeout = 60 })
        local db = mf.mysql((url:gsub("@[^/]+/", "@spec_db/")))
        for i = 1, 3 do
            local res = assert(db:query("SELECT ? AS n", i))
            assert.are.equal(i, tonumber(res[1].n))
        end
        local s = mf.upstream("spec_db"):servers()
        assert.are.equal("down", s[1].state)
        assert.are.equal("up", s[2].state)
        mf.upstream("spec_db_gone", { servers = { "127.0.0.1:" .. dead },
                                      max_fails = 1, fail_timeout = 60 })
        local gone = mf.mysql((url:gsub("@[^/]+/", "@spec_db_gone/")))
        local res, err = gone:query("SELECT 1")
        assert.is_nil(res)
        assert.truthy(err:find("Can't connect", 1, true), err)
        res, err = gone:query("SELECT 1")
        assert.truthy(err:find("no live upstream"), err)
    end)

    it("runs the balancer per attempt with the request's key", function()
        local seen = {}
        mf.upstream("spec_bal", { servers = { "127.0.0.1:" .. dead },
            key = function(k) return "k=" .. k end,
            balancer = function(ctx)
                seen[#seen + 1] = ctx.name .. " " .. ctx.key .. " " .. ctx.attempt
                return "127.0.0.1", port -- not a member: used as it is
            end })
        local r = assert(mf.http.get("http://spec_bal/", { upstream_key = "u7" }))
        assert.are.equal(200, r.status)
        assert.are.same({ "spec_bal k=u7 1" }, seen)
        assert.has_error(function()
            mf.upstream("spec_bal2", { servers = {}, balancer = 5 })
        end, "mf.upstream: balancer: a function expected")
    end)
end)
