-- /notes: rows read and written with parameters (server-side prepared
-- statements: the values never become SQL text).
--
--   GET  /notes?id=N                    → 200 {"id":N,"title":..,"body":..,"created":..}
--                                         404 no such note, 400 a bad id
--   POST /notes {"title":..,"body":..}  → 201 {"id": the new row's id}
--                                         400 bad JSON or a missing field
-- A database failure answers 500 and logs "mysql_site: METHOD /notes: why".
local mf = require "moonflow"
local site = require "_db"

local function get(req, resp)
    local id = site.positive_int(req.query.id)
    if not id then return site.fail(resp, 400, "id: a positive integer") end
    local res, err = site.db():query(
        "SELECT id, title, body, created FROM notes WHERE id = ?", id)
    if not res then return site.failed(req, resp, err) end
    if not res[1] then return site.fail(resp, 404, "no such note") end
    resp:json(res[1])
end

local function post(req, resp)
    local note = mf.json.decode(req.body or "")
    if type(note) ~= "table" or type(note.title) ~= "string" or note.title == ""
        or type(note.body) ~= "string" then
        return site.fail(resp, 400, 'a JSON object {"title": "..", "body": ".."}')
    end
    local res, err = site.db():query(
        "INSERT INTO notes (title, body) VALUES (?, ?)", note.title, note.body)
    if not res then return site.failed(req, resp, err) end
    resp:json({ id = res.insert_id }, 201)
end

return function(req, resp)
    if req.method == "GET" then return get(req, resp) end
    if req.method == "POST" then return post(req, resp) end
    resp.headers["Allow"] = "GET, POST"
    site.fail(resp, 405, "GET or POST")
end
