-- mf.redis through an upstream group: redis://group/0 shards keys over
-- two plain redis-servers (MF_REDIS_URL and MF_REDIS_FLAKY_URL) by
-- consistent hashing, refuses a task whose keys are on two servers, moves
-- a task whose connect was refused to a live server (MF_DEAD_PORT: nothing
-- listens), and opens sessions by key on a group and on a cluster
-- (MF_REDIS_CLUSTER_URL).
local mf = require "moonflow"

local plain_url = assert(os.getenv("MF_REDIS_URL"))
local flaky_url = assert(os.getenv("MF_REDIS_FLAKY_URL"))
local cluster_url = assert(os.getenv("MF_REDIS_CLUSTER_URL"))
local dead = tonumber(os.getenv("MF_DEAD_PORT") or "1")

local function hostport(url)
    return assert(url:match("^redis://([^/]+)"))
end

local plain, flaky = hostport(plain_url), hostport(flaky_url)
local direct = { [plain] = mf.redis(plain_url), [flaky] = mf.redis(flaky_url) }

-- The flaky server may be restarting after another spec killed it.
local function wait_flaky()
    for _ = 1, 100 do
        if direct[flaky]:call("PING") == "PONG" then return end
        mf.sleep(0.05)
    end
    error("the flaky redis-server does not answer")
end

-- Two keys the group places on different servers.
local function split_keys(up, prefix)
    local first = prefix .. 1
    for i = 2, 100 do
        local k = prefix .. i
        if up:pick(k) ~= up:pick(first) then return first, k end
    end
    error("no two keys on different servers")
end

describe("mf.redis through an upstream group", function()
    local up
    setup(function()
        wait_flaky()
        up = mf.upstream("spec_rcache", { servers = { plain, flaky },
            policy = "consistent_hash", max_fails = 1, fail_timeout = 60 })
    end)

    it("puts each key on the server the group picks for it", function()
        local r = mf.redis("redis://spec_rcache/0")
        local on = { [plain] = 0, [flaky] = 0 }
        for i = 1, 40 do
            local k = "rgroup:k" .. i
            assert.are.equal("OK", r:call("SET", k, "v" .. i))
            local home = up:pick(k)
            on[home] = on[home] + 1
            assert.are.equal("v" .. i, direct[home]:call("GET", k))
            local other = home == plain and flaky or plain
            assert.are.equal(mf.null, direct[other]:call("GET", k))
            assert.are.equal("v" .. i, r:call("GET", k))
        end
        assert.truthy(on[plain] > 0 and on[flaky] > 0)
        local got = r:pipeline({ { "GET", "rgroup:k1" }, { "GET", "rgroup:k1" } })
        assert.are.same({ "v1", "v1" }, got)
    end)

    it("refuses a task whose keys are on two servers, sending nothing", function()
        local r = mf.redis("redis://spec_rcache/0")
        local a, b = split_keys(up, "rgroup:x")
        local v, err = r:call("MSET", a, "1", b, "2")
        assert.is_nil(v)
        assert.truthy(err:find("^CROSSSERVER"), err)
        local got = r:pipeline({ { "SET", a, "1" }, { "SET", b, "2" } })
        assert.truthy(got[1].err:find("^CROSSSERVER"))
        assert.truthy(got[2].err:find("^CROSSSERVER"))
        assert.are.equal(mf.null, direct[up:pick(a)]:call("GET", a))
        assert.are.equal(mf.null, direct[up:pick(b)]:call("GET", b))
    end)

    it("sends a round robin group's task whole to one server", function()
        mf.upstream("spec_rrr", { servers = { plain, flaky } })
        local r = mf.redis("redis://spec_rrr/0")
        for i = 1, 4 do
            local got = r:pipeline({ { "SET", "rgroup:rr" .. i, "a" },
                                     { "SET", "rgroup:rs" .. i, "b" },
                                     { "MGET", "rgroup:rr" .. i, "rgroup:rs" .. i } })
            assert.are.same({ "a", "b" }, got[3])
        end
    end)

    it("moves a task off a server that refused the connection", function()
        local g = mf.upstream("spec_rdead", { servers = { "127.0.0.1:" .. dead,
            plain }, policy = "consistent_hash", max_fails = 1,
            fail_timeout = 60 })
        local r = mf.redis("redis://spec_rdead/0")
        for i = 1, 20 do
            assert.are.equal("OK", r:call("SET", "rgroup:d" .. i, "x"))
        end
        local s = g:servers()
        assert.are.equal("down", s[1].state)
        assert.are.equal(1, s[1].failures)
        assert.are.equal("up", s[2].state)
    end)

    it("fails with no live upstream when every server is out", function()
        mf.upstream("spec_rgone", { servers = { "127.0.0.1:" .. dead },
            policy = "consistent_hash", max_fails = 1, fail_timeout = 60 })
        local r = mf.redis("redis://spec_rgone/0")
        local v, err = r:call("GET", "k")
        assert.is_nil(v)
        assert.truthy(err:find("connection refused"), err)
        v, err = r:call("GET", "k")
        assert.is_nil(v)
        assert.truthy(err:find("no live upstream"), err)
    end)

    it("subscribes and publishes on the server of the channel", function()
        local r = mf.redis("redis://spec_rcache/0")
        for i = 1, 4 do
            local ch = "rgroup:ch" .. i
            local sub = assert(r:subscribe(ch))
            assert.are.equal(1, direct[up:pick(ch)]:call("PUBLISH", ch, "a"))
            assert.are.equal(1, r:call("PUBLISH", ch, "b"))
            assert.are.equal("a", sub:next(2000).payload)
            assert.are.equal("b", sub:next(2000).payload)
            sub:close()
        end
    end)

    it("opens a session on the server of its keys", function()
        local r = mf.redis("redis://spec_rcache/0")
        local a, b = split_keys(up, "rgroup:s")
        local got = r:session(a, function(s)
            assert.are.equal("OK", s:call("WATCH", a))
            assert.are.equal("OK", s:call("MULTI"))
            assert.are.equal("QUEUED", s:call("SET", a, "in"))
            return s:call("EXEC")
        end)
        assert.are.same({ "OK" }, got)
        assert.are.equal("in", direct[up:pick(a)]:call("GET", a))
        assert.has_error(function()
            r:session({ a, b }, function() end)
        end, "r:session(keys, fn): the keys are not all on one server of the "
            .. "upstream group")
    end)
end)

describe("r:session on a cluster", function()
    it("runs WATCH/MULTI/EXEC on the node of the keys' slot", function()
        local r = mf.redis(cluster_url .. "/?read_from=master")
        local got = r:session({ "{user1}.a", "{user1}.b" }, function(s)
            assert.are.equal("OK", s:call("WATCH", "{user1}.a"))
            s:call("GET", "{user1}.a")
            assert.are.equal("OK", s:call("MULTI"))
            assert.are.equal("QUEUED", s:call("SET", "{user1}.a", "1"))
            assert.are.equal("QUEUED", s:call("SET", "{user1}.b", "2"))
            return s:call("EXEC")
        end)
        assert.are.same({ "OK", "OK" }, got)
        assert.are.same({ "1", "2" }, r:call("MGET", "{user1}.a", "{user1}.b"))
    end)

    it("refuses keys in two slots, or no key", function()
        local r = mf.redis(cluster_url)
        assert.has_error(function()
            r:session({ "{user1}.a", "{user2}.a" }, function() end)
        end, "r:session(keys, fn): the keys are not all in one slot of the "
            .. "cluster (one hash tag puts them there: {user1}.a, {user1}.b)")
        local ok, err = pcall(r.session, r, function() end)
        assert.is_false(ok)
        assert.truthy(err:find("name the keys", 1, true), err)
    end)
end)
