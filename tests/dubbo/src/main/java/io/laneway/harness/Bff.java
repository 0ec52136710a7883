package io.laneway.harness;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import io.laneway.demo.Hop;
import io.laneway.lane.Lane;
import io.laneway.lane.LaneCounters;
import io.laneway.lane.servlet.LaneFilter;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * A front end's backend-for-frontend pod: Jetty on --ip:--http-port with laneway's LaneFilter
 * (its sticky cookie with --sticky-cookie true),
 * answering every GET by calling --next APP over Dubbo. The answer is the JSON the gateway tests
 * read: {"pod": ID, "chain": [ID, ...every pod downstream], "lane": the lane it passed on}.
 * GET /laneway/lanes answers with laneway's {@link LaneCounters}: requests served and failed, by
 * lane, since the JVM started.
 */
final class Bff {
    static void run(Args args) throws Exception {
        String id = args.require("id");
        String ip = args.require("ip");
        int httpPort = args.getInt("http-port", 8080);
        String zk = args.require("zk");
        String next = args.require("next");

        var registry = Common.registry(zk);
        registry.setRegister(false);
        ReferenceConfig<Hop> downstream = Common.hopReference(next);
        DubboBootstrap.getInstance()
                .application(Common.application(args.get("app", "gateway-bff"), null))
                .registry(registry)
                .configCenter(Common.configCenter(zk))
                .reference(downstream)
                .start();

        Server server = new Server();
        ServerConnector http = new ServerConnector(server);
        http.setHost(ip);
        http.setPort(httpPort);
        server.addConnector(http);
        ServletContextHandler context = new ServletContextHandler();
        FilterHolder lanes = new FilterHolder(LaneFilter.class);
        lanes.setInitParameter("header", args.get("header", "x-lane"));
        lanes.setInitParameter(LaneFilter.STICKY_COOKIE_PARAM, args.get("sticky-cookie", "false"));
        context.addFilter(lanes, "/*", EnumSet.of(DispatcherType.REQUEST));
        context.addServlet(new ServletHolder(new ChainServlet(id, downstream.get())), "/*");
        context.addServlet(new ServletHolder(new CountersServlet(LaneCounters.register())), "/laneway/lanes");
        server.setHandler(context);
        server.start();

        Main.OUT.println("READY bff id=" + id + " addr=" + ip + ":" + http.getLocalPort()
                + " next=" + next + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        new CountDownLatch(1).await();
    }

    static final class ChainServlet extends HttpServlet {
        private final String id;
        private final transient Hop next;

        ChainServlet(String id, Hop next) {
            this.id = id;
            this.next = next;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            String lane = Lane.effective();
            StringBuilder body = new StringBuilder("{\"pod\":").append(Common.json(id));
            int status = 200;
            try {
                List<String> chain = next.serve();
                body.append(",\"chain\":[").append(Common.json(id));
                for (String pod : chain) {
                    body.append(',').append(Common.json(pod));
                }
                body.append(']');
            } catch (RuntimeException e) {
                status = 502;
                body.append(",\"error\":").append(Common.json(String.valueOf(e.getMessage())));
            }
            body.append(",\"lane\":").append(lane == null ? "null" : Common.json(lane)).append('}');
            byte[] bytes = body.toString().getBytes(StandardCharsets.UTF_8);
            resp.setStatus(status);
            resp.setContentType("application/json");
            resp.setContentLength(bytes.length);
            resp.getOutputStream().write(bytes);
        }
    }

    static final class CountersServlet extends HttpServlet {
        private final transient LaneCounters counters;

        CountersServlet(LaneCounters counters) {
            this.counters = counters;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            byte[] bytes = counters.json().getBytes(StandardCharsets.UTF_8);
            resp.setContentType("application/json");
            resp.setContentLength(bytes.length);
            resp.getOutputStream().write(bytes);
        }
    }

    private Bff() {}
}
