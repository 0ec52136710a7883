package io.laneway.lane.servlet;

import java.io.IOException;
import java.io.PrintWriter;

import io.laneway.lane.Probe;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;

/**
 * The response to a probed request: the probe's hop records go in a header just before the
 * response starts (headers cannot change after), so they hold every onward call made before.
 */
final class ProbedResponse extends HttpServletResponseWrapper {
    private final Probe probe;
    private boolean stamped;

    ProbedResponse(HttpServletResponse response, Probe probe) {
        super(response);
        this.probe = probe;
    }

    /** Adds the hop records, once, unless the response has started. */
    void stamp() {
        if (!stamped && !isCommitted()) {
            stamped = true;
            setHeader(Probe.HOPS, probe.hops());
        }
    }

    @Override
    public ServletOutputStream getOutputStream() throws IOException {
        stamp();
        return super.getOutputStream();
    }

    @Override
    public PrintWriter getWriter() throws IOException {
        stamp();
        return super.getWriter();
    }

    @Override
    public void flushBuffer() throws IOException {
        stamp();
        super.flushBuffer();
    }

    @Override
    public void sendError(int status, String message) throws IOException {
        stamp();
        super.sendError(status, message);
    }

    @Override
    public void sendError(int status) throws IOException {
        stamp();
        super.sendError(status);
    }

    @Override
    public void sendRedirect(String location) throws IOException {
        stamp();
        super.sendRedirect(location);
    }
}
