-- mf.json: lua-cjson behind a stable name.
local mf = require "moonflow"

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
    end)

    it("returns nil, err for malformed input", function()
        local v, err = mf.json.decode("{nope")
        assert.is_nil(v)
        assert.is_string(err)
    end)

    it("raises when a value cannot be encoded", function()
        assert.has_error(function() mf.json.encode { f = print } end)
    end)
end)
