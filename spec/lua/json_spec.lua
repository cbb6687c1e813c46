-- mf.json: our encoder (moonflow.json), lua-cjson's decoder.
local mf = require "moonflow"

-- Decodes with lua-cjson: what another program reading our text would see.
local function roundtrip(v)
    return mf.json.decode(mf.json.encode(v))
end

describe("mf.json", function()
    it("encodes tables", function()
        assert.are.equal('{"a":1}', mf.json.encode { a = 1 })
        assert.are.equal('[1,2,"x"]', mf.json.encode { 1, 2, "x" })
    end)

    it("decodes documents", function()
        local v = mf.json.decode('{"list":[1,2,3],"s":"hi","t":true}')
        assert.are.same({ list = { 1, 2, 3 }, s = "hi", t = true }, v)
    end)

    it("round-trips null as mf.json.null", function()
        local v = mf.json.decode('{"n":null}')
        assert.are.equal(mf.json.null, v.n)
        assert.are.equal('{"n":null}', mf.json.encode(v))
        assert.are.equal(mf.null, mf.json.null)
        assert.are.equal("null", mf.json.encode(nil))
        assert.are.equal("[1,null,3]", mf.json.encode { 1, mf.null, 3 })
    end)

    it("returns nil, err for malformed input", function()
        local v, err = mf.json.decode("{nope")
        assert.is_nil(v)
        assert.is_string(err)
    end)

    it("writes integers in full, other numbers as tostring does", function()
        assert.are.equal("0", mf.json.encode(0))
        assert.are.equal("-17", mf.json.encode(-17))
        assert.are.equal("100000000000000", mf.json.encode(1e14))
        assert.are.equal("9007199254740992", mf.json.encode(2 ^ 53))
        assert.are.equal("-9007199254740992", mf.json.encode(-2 ^ 53))
        assert.are.equal(tostring(2 ^ 60), mf.json.encode(2 ^ 60))
        assert.are.equal("0.5", mf.json.encode(0.5))
        assert.are.equal(tostring(1 / 3), mf.json.encode(1 / 3))
        assert.are.equal("1e-07", mf.json.encode(1e-7))
        assert.are.same({ 123456789012, -0.25 }, roundtrip { 123456789012, -0.25 })
    end)

    it("escapes quotes, backslashes and control bytes, and nothing else", function()
        assert.are.equal([["a\"b\\c"]], mf.json.encode('a"b\\c'))
        assert.are.equal([["\n\r\t\b\f"]], mf.json.encode("\n\r\t\b\f"))
        assert.are.equal([["\u0000\u0001\u001f\u007f"]], mf.json.encode("\0\1\31\127"))
        assert.are.equal([["a/b é"]], mf.json.encode("a/b é"))
        local bytes = {}
        for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
        local all = table.concat(bytes)
        assert.are.equal(all, roundtrip(all))
    end)

    it("makes arrays of tables keyed 1..n, objects of the rest", function()
        assert.are.equal("{}", mf.json.encode {})
        assert.are.equal('[{},{"k":[true,false]}]', mf.json.encode { {}, { k = { true, false } } })
        local mixed = mf.json.encode { [1] = "a", x = 1 }
        assert.is_true(mixed == '{"1":"a","x":1}' or mixed == '{"x":1,"1":"a"}', mixed)
        assert.are.same({ ["1.5"] = true }, roundtrip { [1.5] = true })
        assert.are.same({ ["0"] = 1 }, roundtrip { [0] = 1 })
        assert.are.equal("[1,null,null,4]", mf.json.encode { 1, nil, nil, 4 })
    end)

    it("raises on values JSON cannot carry", function()
        assert.has_error(function() mf.json.encode { f = print } end)
        local function message(v)
            local ok, err = pcall(mf.json.encode, v)
            assert.is_false(ok)
            return err
        end
        assert.matches("json: cannot encode a function", message(print))
        assert.matches("json: cannot encode a thread", message(coroutine.create(print)))
        assert.matches("json: cannot encode NaN", message(0 / 0))
        assert.matches("json: cannot encode an infinity", message { x = math.huge })
        assert.matches("json: cannot encode a table with a boolean key", message { [true] = 1 })
        assert.matches("sparse array %(1 values, the last at %[100%]%)", message { [100] = 1 })
        local loop = {}
        loop.self = loop
        assert.matches("nested deeper than 1000", message(loop))
        assert.matches("mf.json.encode(v): a value expected",
            select(2, pcall(mf.json.encode)), 1, true)
    end)

    it("names the caller's line in its errors", function()
        local ok, err = pcall(function()
            return mf.json.encode(print) -- this line
        end)
        assert.is_false(ok)
        assert.matches("json_spec.lua:%d+: json: cannot encode a function", err)
    end)

    it("encodes large documents whole, then encodes small ones again", function()
        local big = {}
        for i = 1, 100000 do big[i] = { id = i, name = ("n"):rep(10) } end
        local text = mf.json.encode(big)
        assert.is_true(#text > 2 * 1024 * 1024)
        local back = mf.json.decode(text)
        assert.are.equal(100000, #back)
        assert.are.same({ id = 77777, name = ("n"):rep(10) }, back[77777])
        assert.are.equal('{"a":[1]}', mf.json.encode { a = { 1 } })
    end)

    it("ignores metatables (raw contents)", function()
        local t = setmetatable({ a = 1 }, { __index = function() return 2 end,
                                            __pairs = function() error("no") end })
        assert.are.equal('{"a":1}', mf.json.encode(t))
    end)
end)
