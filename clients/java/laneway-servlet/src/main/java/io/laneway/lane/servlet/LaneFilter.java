package io.laneway.lane.servlet;

import java.io.IOException;
import java.util.Enumeration;

import io.laneway.lane.Baggage;
import io.laneway.lane.Lane;
import io.laneway.lane.LaneMetrics;
import io.laneway.lane.OwnLane;
import io.laneway.lane.Probe;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

/**
 * Sets {@link Lane} for each request: the lane header ({@code x-lane}, init-param
 * {@value #HEADER_PARAM}), else the {@code lane} member of the W3C {@code baggage} header
 * (init-param {@value #BAGGAGE_KEY_PARAM}), so that a service instrumented with OpenTelemetry
 * needs nothing else. A value that is not a valid lane is ignored. The previous lane is restored
 * when the request leaves the filter, so nothing leaks onto the next request of a pooled thread.
 *
 * <p>With init-param {@value #STICKY_COOKIE_PARAM} {@code true}, a request in no lane that
 * carries no lane cookie (named as the lane header) is answered with one naming this instance's
 * own lane ({@link OwnLane}), or {@value #NO_LANE} for a baseline instance: a browser drawn into
 * a lane by weight at a gateway that cannot set the cookie itself stays in that lane, and one
 * drawn into baseline stays there (laneway's routes honour both cookies).
 *
 * <p>A request with a probe mark ({@link Probe#MARK}, sent by {@code kubectl laneway probe}) is
 * answered with the hop records ({@link Probe#HOPS} header) of this hop and of every onward call
 * made through a laneway client, added when the response starts.
 *
 * <p>Each request is counted by its lane and how it was learnt ({@link LaneMetrics}).
 *
 * <p>Register it for {@code REQUEST} dispatches (and {@code ASYNC} ones for async servlets).
 */
public class LaneFilter implements Filter {
    public static final String DEFAULT_HEADER = "x-lane";
    public static final String HEADER_PARAM = "header";
    public static final String BAGGAGE_KEY_PARAM = "baggage-key";
    public static final String STICKY_COOKIE_PARAM = "sticky-cookie";
    /** The lane cookie's value for a client drawn into no lane. */
    public static final String NO_LANE = "-";
    static final String BAGGAGE_HEADER = "baggage";

    private String header = DEFAULT_HEADER;
    private String baggageKey = Baggage.DEFAULT_KEY;
    private boolean sticky;
    private String application;
    private String pod;

    public LaneFilter() {}

    /** A filter reading the lane from {@code header} (then baggage), for programmatic registration. */
    public LaneFilter(String header) {
        this.header = nonEmpty(header, DEFAULT_HEADER);
    }

    /**
     * A filter reading the lane from {@code header}, naming this application and pod in the hop
     * records of probed requests ({@code null}: as {@link Probe} finds them).
     */
    public LaneFilter(String header, String application, String pod) {
        this(header);
        this.application = application;
        this.pod = pod;
    }

    @Override
    public void init(FilterConfig config) {
        String h = config.getInitParameter(HEADER_PARAM);
        if (h != null) {
            header = nonEmpty(h.trim(), DEFAULT_HEADER);
        }
        String key = config.getInitParameter(BAGGAGE_KEY_PARAM);
        if (key != null) {
            baggageKey = nonEmpty(key.trim(), Baggage.DEFAULT_KEY);
        }
        sticky = Boolean.parseBoolean(trim(config.getInitParameter(STICKY_COOKIE_PARAM)));
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        String lane = request instanceof HttpServletRequest ? lane((HttpServletRequest) request) : null;
        if (sticky && lane == null && request instanceof HttpServletRequest
                && response instanceof HttpServletResponse && !hasLaneCookie((HttpServletRequest) request)) {
            String own = OwnLane.get();
            ((HttpServletResponse) response).addHeader("Set-Cookie",
                    header + "=" + (own != null ? own : NO_LANE) + "; Path=/; HttpOnly; SameSite=Lax");
        }
        String learnt = lane == null ? null
                : lane.equals(trim(((HttpServletRequest) request).getHeader(header))) ? "header" : "baggage";
        LaneMetrics.countServed(lane, learnt);
        Probe probe = probe(request, lane, learnt);
        ServletResponse answer = probe != null && response instanceof HttpServletResponse
                ? new ProbedResponse((HttpServletResponse) response, probe) : response;
        String previous = Lane.set(lane);
        boolean wasServing = Lane.serving(true);
        boolean failed = true;
        try {
            chain.doFilter(request, answer);
            failed = response instanceof HttpServletResponse && ((HttpServletResponse) response).getStatus() >= 500;
        } finally {
            if (failed) {
                LaneMetrics.countFailed(lane);
            }
            Lane.serving(wasServing);
            Lane.restore(previous);
            if (answer instanceof ProbedResponse) {
                ((ProbedResponse) answer).stamp();
            }
            Probe.end(probe);
        }
    }

    // a probed request ({@code kubectl laneway probe}): this hop's record
    private Probe probe(ServletRequest request, String lane, String learnt) {
        String mark = request instanceof HttpServletRequest ? ((HttpServletRequest) request).getHeader(Probe.MARK) : null;
        return mark == null ? null : Probe.begin(mark, application, pod, lane, learnt);
    }

    /** The header this filter reads the lane from. */
    public String header() {
        return header;
    }

    /**
     * The lane of an incoming request, or {@code null}: the lane header if it holds a valid lane,
     * else the first {@code baggage} header with a valid lane member.
     */
    protected String lane(HttpServletRequest request) {
        String lane = Lane.validOrNull(trim(request.getHeader(header)));
        if (lane != null) {
            return lane;
        }
        Enumeration<String> baggage = request.getHeaders(BAGGAGE_HEADER);
        while (baggage != null && baggage.hasMoreElements()) {
            lane = Baggage.lane(baggage.nextElement(), baggageKey);
            if (lane != null) {
                return lane;
            }
        }
        return null;
    }

    private boolean hasLaneCookie(HttpServletRequest request) {
        Cookie[] cookies = request.getCookies();
        if (cookies != null) {
            for (Cookie c : cookies) {
                if (header.equals(c.getName())) {
                    return true;
                }
            }
        }
        return false;
    }

    private static String trim(String value) {
        return value == null ? null : value.trim();
    }

    private static String nonEmpty(String value, String fallback) {
        return value == null || value.isEmpty() ? fallback : value;
    }
}
