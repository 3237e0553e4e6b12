//! The first frame, drawn before the backend is known: detecting it imports torch in a Python
//! process, which takes seconds, and a terminal that stays blank meanwhile looks broken.

use ratatui::Frame;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Paragraph, Wrap};

/// `note` says what ddptop is waiting for.
pub fn draw(frame: &mut Frame, note: &str) {
    let area = frame.area();
    let block = Block::bordered()
        .border_type(BorderType::Rounded)
        .title(" ddptop ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines = vec![
        Line::from(vec![
            Span::styled("ddptop", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(" · "),
            Span::raw(note.to_string()),
        ]),
        Line::raw(""),
        Line::styled(
            "The dashboard appears as soon as the backend is known; keys typed meanwhile are kept.",
            Style::default().add_modifier(Modifier::DIM),
        ),
    ];
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    #[test]
    fn the_splash_says_what_ddptop_waits_for_even_at_80x24() {
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        t.draw(|f| {
            super::draw(
                f,
                "detecting the backend: asking Python for torch and CUDA…",
            )
        })
        .unwrap();
        let buf = t.backend().buffer();
        let text: Vec<String> = (0..buf.area.height)
            .map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect())
            .collect();
        let text = text.join("\n");
        assert!(text.contains("ddptop · detecting the backend"), "{text}");
        assert!(
            text.contains("The dashboard appears as soon as the backend is known"),
            "{text}"
        );
    }
}
