-- mf.redis on a Redis Cluster (MF_REDIS_CLUSTER_URL: three masters and
-- three replicas that run_specs.py makes): the same object and methods as
-- on one node, commands routed by key slot, pipelines split per node and
-- put back in order, CROSSSLOT refused before sending, reads on replicas,
-- mf.task.redis and pub/sub (sharded too).
local mf = require "moonflow"

local url = assert(os.getenv("MF_REDIS_CLUSTER_URL"))
local r = mf.redis(url)

describe("mf.redis on a cluster", function()
    it("gives the same object for the same URL and options", function()
        assert.are.equal(r, mf.redis(url))
        local rr = mf.redis(url, { read_from = "replica" })
        assert.are.equal(rr, mf.redis(url, { read_from = "replica" }))
        assert.are_not.equal(r, rr)
    end)

    it("raises on a malformed cluster URL or read_from", function()
        assert.has_error(function() mf.redis("redis-cluster://") end,
            "mf.redis(url [, opts]): malformed URL 'redis-cluster://': want "
            .. "redis-cluster://[[user]:password@]host[:port][,host[:port]...]"
            .. "[/][?read_from=replica]")
        assert.has_error(function() mf.redis(url .. "/?read_from=anywhere") end)
        assert.has_error(function() mf.redis(url, { read_from = "anywhere" }) end)
    end)

    it("routes r:call by key and keeps hash tags together", function()
        for i = 1, 30 do
            assert.are.equal("OK", r:call("SET", "lua:k" .. i, "v" .. i))
        end
        for i = 1, 30 do
            assert.are.equal("v" .. i, r:call("GET", "lua:k" .. i))
        end
        assert.are.equal("OK", r:call("MSET", "{u1}.a", "1", "{u1}.b", "2"))
        assert.are.same({ "1", "2" }, r:call("MGET", "{u1}.a", "{u1}.b"))
        assert.are.equal(3, r:connects()) -- one per master: its nodes' clients
    end)

    it("refuses a command over several slots with CROSSSLOT", function()
        local v, err = r:call("MGET", "lua:k1", "lua:k2")
        assert.is_nil(v)
        assert.truthy(err:find("^CROSSSLOT"))
    end)

    it("splits r:pipeline per node and keeps the order", function()
        local cmds, want = {}, {}
        for i = 1, 30 do
            cmds[#cmds + 1] = { "GET", "lua:k" .. i }
            want[#want + 1] = "v" .. i
        end
        cmds[#cmds + 1] = { "MGET", "lua:k1", "lua:k2" }
        local got = r:pipeline(cmds)
        assert.are.equal("v30", got[30])
        assert.truthy(got[31].err:find("^CROSSSLOT"))
        got[31] = nil
        assert.are.same(want, got)
    end)

    it("reads from replicas with read_from = \"replica\"", function()
        local rr = mf.redis(url, { read_from = "replica" })
        assert.are.equal("OK", r:call("SET", "{lua}ro", "x"))
        assert.are.equal(1, r:pipeline{ { "SET", "{lua}ro", "y" }, { "WAIT", 1, 2000 } }[2])
        assert.are.equal("y", rr:call("GET", "{lua}ro"))
        assert.are.equal(2, rr:call("INCR", "{lua}n") + 1) -- writes: the master
    end)

    it("runs mf.task.redis over nodes", function()
        local res = mf.task.redis(r, { { "SET", "lua:t1", "a" }, { "GET", "lua:t1" },
                                       { "GET", "lua:k7" } }):wait()
        assert.are.same({ "OK", "a", "v7" }, res.values)
    end)

    it("subscribes on a node and hears a publish from any", function()
        local sub = r:subscribe("lua:chan")
        mf.sleep(50) -- the other nodes learn of it over the cluster bus
        r:call("PUBLISH", "lua:chan", "hello")
        assert.are.same({ kind = "message", channel = "lua:chan", payload = "hello" },
            sub:next(2000))
        sub:close()
    end)

    it("subscribes to a sharded channel on its slot's node", function()
        local sub = assert(r:ssubscribe("{lua}s"))
        assert.are.equal(1, r:call("SPUBLISH", "{lua}s", "hi"))
        assert.are.same({ kind = "smessage", channel = "{lua}s", payload = "hi" },
            sub:next(2000))
        sub:close()
    end)
end)
