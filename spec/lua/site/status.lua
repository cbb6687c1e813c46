return function(req, resp)
    resp.status = 201
    resp.headers["X-Test"] = "yes"
    resp:set_header("X-Multi", { "a", "b" })
    resp:send("created")
end
