-- The cookie module behind req.cookies and resp:set_cookie (require
-- "moonflow.cookie"): RFC 6265's Cookie pairs and Set-Cookie values.
local cookie = require "moonflow.cookie"

describe("moonflow.cookie", function()
    it("parses a Cookie header: quotes dropped, junk skipped, the first name wins", function()
        assert.are.same({ a = "1", b = "two", c = "" },
            cookie.parse(' a=1;b="two" ; junk;=x; c=; a=again; bad name=1'))
        assert.are.same({}, cookie.parse(""))
    end)

    it("formats Set-Cookie values with attributes in RFC 6265's order", function()
        assert.equals("id=42", cookie.format("id", "42"))
        assert.equals("id=42; Expires=Thu, 01 Jan 1970 00:00:10 GMT; Max-Age=60; "
            .. "Domain=example.test; Path=/app; Secure; HttpOnly; SameSite=None",
            cookie.format("id", "42", { path = "/app", domain = "example.test",
                expires = 10, max_age = 60, secure = true, httponly = true,
                samesite = "None" }))
        assert.equals('q="a-b"; Expires=Wed, 21 Oct 2015 07:28:00 GMT',
            cookie.format("q", '"a-b"', { expires = "Wed, 21 Oct 2015 07:28:00 GMT" }))
    end)

    it("refuses what a Set-Cookie cannot carry, naming it", function()
        assert.has_error(function() cookie.format("bad name", "x") end,
            "cookie.format(name, value [, opts]): name: a cookie name (a token) expected")
        for _, v in ipairs { "a b", "a;b", "a,b", 'a"b', "a\\b", "a\nb" } do
            assert.has_error(function() cookie.format("n", v) end)
        end
        assert.has_error(function() cookie.format("n", "v", { path = "/a;b" }) end,
            "set_cookie: path must be a string without ';' or control bytes")
        assert.has_error(function() cookie.format("n", "v", { samesite = "None" }) end,
            'set_cookie: samesite "None" needs secure = true')
        assert.has_error(function() cookie.format("n", "v", { samesite = "lax" }) end)
        assert.has_error(function() cookie.format("n", "v", { maxage = 1 }) end,
            "set_cookie: unknown option 'maxage' (path, domain, expires, max_age, "
            .. "secure, httponly, samesite)")
        assert.has_error(function() cookie.format("n", "v", { secure = "yes" }) end)
    end)
end)
