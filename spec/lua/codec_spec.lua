-- mf.base64, mf.hex, mf.crypto, mf.uri: known vectors (RFC 4648 §10,
-- FIPS 180 "abc", RFC 2202 / RFC 4231 case 2), round trips of every byte,
-- refusals with the byte they stopped at, misuse raising.
local mf = require "moonflow"

local all = {}
for i = 0, 255 do all[#all + 1] = string.char(i) end
all = table.concat(all)

describe("mf.base64", function()
    it("encodes and decodes RFC 4648's vectors", function()
        local vectors = { [""] = "", f = "Zg==", fo = "Zm8=", foo = "Zm9v",
                          foob = "Zm9vYg==", fooba = "Zm9vYmE=", foobar = "Zm9vYmFy" }
        for plain, coded in pairs(vectors) do
            assert.equals(coded, mf.base64.encode(plain))
            assert.equals(plain, mf.base64.decode(coded))
            assert.equals(plain, mf.base64.decode((coded:gsub("=", ""))))
            assert.equals((coded:gsub("=", "")), mf.base64.encode_url(plain))
        end
    end)

    it("uses the URL alphabet without padding for encode_url", function()
        assert.equals("+/+/", mf.base64.encode("\251\255\191"))
        assert.equals("-_-__g", mf.base64.encode_url("\251\255\191\254"))
        assert.equals("\251\255\191\254", mf.base64.decode_url("-_-__g"))
        assert.equals("\251\255\191\254", mf.base64.decode_url("-_-__g=="))
    end)

    it("round-trips every byte, short and long", function()
        for _, s in ipairs { all, all:rep(100), all:sub(1, 1), all:sub(1, 2) } do
            assert.equals(s, mf.base64.decode(mf.base64.encode(s)))
            assert.equals(s, mf.base64.decode_url(mf.base64.encode_url(s)))
        end
    end)

    it("returns nil and the byte where the input went wrong", function()
        local function refused(f, s)
            local v, err = f(s)
            assert.is_nil(v)
            return err
        end
        assert.equals("invalid base64 at byte 3", refused(mf.base64.decode, "Zm 9v"))
        assert.equals("invalid base64 at byte 1", refused(mf.base64.decode, "-_-_"))
        assert.equals("invalid base64 at byte 1", refused(mf.base64.decode_url, "+/+/"))
        assert.equals("invalid base64 at byte 2", refused(mf.base64.decode, "Z=m9"))
        assert.equals("invalid base64 at byte 4", refused(mf.base64.decode, "Zm9=="))
        assert.equals("invalid base64: it ends too early", refused(mf.base64.decode, "Zm9vY"))
        assert.equals("invalid base64 at byte 5", refused(mf.base64.decode, "Zm9v\n"))
    end)

    it("raises on misuse", function()
        assert.has_error(function() mf.base64.encode({}) end)
        assert.has_error(function() mf.base64.decode() end)
    end)
end)

describe("mf.hex", function()
    it("encodes lowercase and decodes either case", function()
        assert.equals("666f6f626172", mf.hex.encode("foobar"))
        assert.equals("", mf.hex.encode(""))
        assert.equals("foobar", mf.hex.decode("666F6f626172"))
        assert.equals(all, mf.hex.decode(mf.hex.encode(all)))
        assert.equals(512, #mf.hex.encode(all))
    end)

    it("returns nil and the byte where the input went wrong", function()
        local v, err = mf.hex.decode("6g")
        assert.is_nil(v)
        assert.equals("invalid hex at byte 2", err)
        v, err = mf.hex.decode("666")
        assert.is_nil(v)
        assert.equals("invalid hex: an odd number of digits", err)
        v, err = mf.hex.decode("66x")
        assert.is_nil(v)
        assert.equals("invalid hex at byte 3", err)
    end)
end)

describe("mf.crypto", function()
    local hex = mf.hex.encode

    it("gives raw digests of FIPS 180's \"abc\"", function()
        assert.equals("900150983cd24fb0d6963f7d28e17f72", hex(mf.crypto.md5("abc")))
        assert.equals("a9993e364706816aba3e25717850c26c9cd0d89d", hex(mf.crypto.sha1("abc")))
        assert.equals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                      hex(mf.crypto.sha256("abc")))
        assert.equals("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                      .. "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
                      hex(mf.crypto.sha512("abc")))
        assert.equals(20, #mf.crypto.sha1(all:rep(1000)))
    end)

    it("gives raw HMACs of RFC 2202 / RFC 4231 case 2", function()
        local key, data = "Jefe", "what do ya want for nothing?"
        assert.equals("750c783e6ab0b503eaa86e310a5db738", hex(mf.crypto.hmac("md5", key, data)))
        assert.equals("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
                      hex(mf.crypto.hmac("sha1", key, data)))
        assert.equals("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
                      hex(mf.crypto.hmac("sha256", key, data)))
        assert.equals("164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"
                      .. "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
                      hex(mf.crypto.hmac("sha512", key, data)))
    end)

    it("gives n random bytes, different each time", function()
        assert.equals("", mf.crypto.random(0))
        local a, b = mf.crypto.random(32), mf.crypto.random(32)
        assert.equals(32, #a)
        assert.are_not.equal(a, b)
        assert.equals(100000, #mf.crypto.random(100000))
    end)

    it("raises on misuse, naming the argument", function()
        assert.has_error(function() mf.crypto.hmac("sha3", "k", "d") end,
            "mf.crypto.hmac(alg, key, s): alg: \"md5\", \"sha1\", \"sha256\" or \"sha512\" expected")
        assert.has_error(function() mf.crypto.random(-1) end)
        assert.has_error(function() mf.crypto.random(1048577) end)
        assert.has_error(function() mf.crypto.sha256() end)
    end)
end)

describe("mf.uri", function()
    it("escapes all but RFC 3986's unreserved bytes", function()
        assert.equals("a%20b%2F%C3%A9~-._", mf.uri.escape("a b/é~-._"))
        assert.equals(all, mf.uri.unescape(mf.uri.escape(all)))
        assert.equals(all:rep(20), mf.uri.unescape(mf.uri.escape(all:rep(20))))
        assert.equals("a+b c", mf.uri.unescape("a+b%20c"))
    end)

    it("refuses a bad escape, naming its byte", function()
        local v, err = mf.uri.unescape("ok%2%zz")
        assert.is_nil(v)
        assert.equals("invalid escape at byte 3", err)
        v, err = mf.uri.unescape("%41%4")
        assert.is_nil(v)
        assert.equals("invalid escape at byte 4", err)
    end)

    it("encodes args with sorted keys, flags and repeated keys", function()
        assert.equals("a=1&b=x%20y&flag&k=1&k=two",
            mf.uri.encode_args { b = "x y", a = 1, flag = true, off = false, k = { 1, "two" } })
        assert.equals("", mf.uri.encode_args {})
        assert.has_error(function() mf.uri.encode_args { a = {} and print } end,
            'mf.uri.encode_args: the value of "a" is a function (a string, a number, '
            .. "a boolean or a list of them expected)")
        assert.has_error(function() mf.uri.encode_args { [1] = "x" } end)
    end)

    it("decodes args as req.query does, up to max pairs", function()
        local t = mf.uri.decode_args("a=1&a=2&b=x+y%21&flag&&e=")
        assert.are.same({ a = { "1", "2" }, b = "x y!", flag = true, e = "" }, t)
        local back = mf.uri.decode_args(mf.uri.encode_args { s = all })
        assert.equals(all, back.s)
        local many = {}
        for i = 1, 150 do many[#many + 1] = "k" .. i .. "=" .. i end
        local got, err = mf.uri.decode_args(table.concat(many, "&"))
        assert.equals("truncated", err)
        local n = 0
        for _ in pairs(got) do n = n + 1 end
        assert.equals(100, n)
        got, err = mf.uri.decode_args(table.concat(many, "&"), 0)
        assert.is_nil(err)
        assert.equals("150", got.k150)
        assert.are.same({}, mf.uri.decode_args(""))
    end)
end)
