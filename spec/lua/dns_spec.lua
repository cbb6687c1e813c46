-- mf.task.dns and mf.dns.resolve with the loop's resolver, on names that
-- never leave the machine (/etc/hosts, numeric addresses, a malformed name
-- refused before any query).
local mf = require "moonflow"

describe("mf.dns.resolve", function()
    it("gives a name's addresses from /etc/hosts, and numeric ones as they are", function()
        local addrs = assert(mf.dns.resolve("localhost"))
        local seen = {}
        for _, a in ipairs(addrs) do seen[a] = true end
        assert.is_true(seen["127.0.0.1"])
        assert.are.same({ "127.0.0.1" }, mf.dns.resolve("127.0.0.1"))
        assert.are.same({ "::1" }, mf.dns.resolve("::1"))
    end)

    it("returns nil and \"dns error\" for a name that cannot resolve", function()
        local addrs, err = mf.dns.resolve("a..b")
        assert.is_nil(addrs)
        assert.equals("dns error", err)
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.dns.resolve(1) end, "mf.dns.resolve(host): a name expected, got number")
        assert.has_error(function() mf.dns.resolve("") end)
        assert.has_error(function() mf.dns.resolve(("a"):rep(300)) end)
    end)
end)

describe("mf.task.dns", function()
    it("is a step of a parallel", function()
        local r = mf.parallel { mf.task.dns("localhost"), mf.task.dns("127.0.0.1"),
                                mf.task.dns("a..b") }:wait()
        assert.equals("success", r[1].state)
        assert.equals("127.0.0.1", r[2].addresses[1])
        assert.equals("dns error", r[3].state)
    end)
end)
