return function(req, resp)
    resp:json {
        method = req.method, path = req.path, uri = req.uri,
        version = req.version, query = req.query, body = req.body,
        agent = req.headers["USER-AGENT"], custom = req:header("x-custom"),
        peer = req.peer, id = req.id,
    }
end
