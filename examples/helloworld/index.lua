-- Hello world as a `moonflow serve` site: this file answers `/`.
--
--   moonflow serve examples/helloworld --listen 127.0.0.1:8888
--   curl http://127.0.0.1:8888/
--
-- A handler is a function of the request and the response; the server
-- runs it in a coroutine of one of its workers.
return function(_, resp)
    resp.headers["Content-Type"] = "text/html"
    resp:send("<html>Hello World!</html>")
end
